// Package safefile opens the files a server trusts (its state directory,
// its ACL) only when nobody but the server's own user (or root) could have
// written them: a directory or file writable by group or others, or owned
// by another user, is refused, and a symbolic link inside a state
// directory is never followed (O_NOFOLLOW). Each refusal is an error that
// names the path, what is wrong and the command that fixes it.
//
// Why: a root broker whose data directory another user can write would
// otherwise create and overwrite files wherever a planted symbolic link
// points, and load state (retained messages, sessions) or an ACL someone
// else wrote. docs/security.md says what is checked.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrUnsafe is wrapped by every refusal of this package (tested with
// errors.Is).
var ErrUnsafe = errors.New("unsafe ownership or permissions")

// owner returns the uid of fi's file, or -1 when the platform has none.
func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// checkInfo refuses a file or directory (described by fi, at path) that
// is writable by group or others or owned by a user other than the
// process's effective user or root.
func checkInfo(path string, fi fs.FileInfo) error {
	what, fix := "file", "chmod go-w "+path
	if fi.IsDir() {
		what, fix = "directory", "chmod 700 "+path
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%w: %s %s is writable by group or others (mode %04o): make it the broker's alone (%s)", ErrUnsafe, what, path, perm, fix)
	}
	if uid, me := owner(fi), os.Geteuid(); uid >= 0 && uid != me && uid != 0 {
		return fmt.Errorf("%w: %s %s is owned by uid %d, not by the broker's user (uid %d) or root: chown %d %s", ErrUnsafe, what, path, uid, me, me, path)
	}
	return nil
}

// CheckDir checks a state directory: it must be a directory (a symbolic
// link naming one is followed: the link's own directory is the
// administrator's), owned by the process's effective user or root, and
// not writable by group or others.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("couldn't check directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafe, dir)
	}
	return checkInfo(dir, fi)
}

// OpenInDir opens a file inside a state directory that CheckDir accepted:
// flag and perm as for os.OpenFile, with O_NOFOLLOW added, so a symbolic
// link at path is refused and its target never opened or created. The
// opened file must be a regular file, owned by the process's effective
// user or root, not writable by group or others; otherwise it is closed
// and refused. Its signature fits bbolt's Options.OpenFile.
func OpenInDir(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: %s is a symbolic link: the broker never follows links in its data directory; remove it (rm %s)", ErrUnsafe, path, path)
	}
	if err != nil {
		return nil, err
	}
	if err := checkOpened(path, f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile reads a file the server trusts (an ACL): a symbolic link is
// followed (administrators link configuration files), but the file read
// must be a regular file owned by the process's effective user or root and
// not writable by group or others. The check is made on the opened file,
// so the file checked is the file read.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkOpened(path, f); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func checkOpened(path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("couldn't check %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, path)
	}
	return checkInfo(path, fi)
}
