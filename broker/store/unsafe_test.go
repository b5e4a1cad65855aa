package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/quiot/quiot/broker/store"
	"github.com/quiot/quiot/internal/safefile"
	"github.com/quiot/quiot/internal/testutil"
)

// openAll opens every file the broker keeps in dir (broker.db,
// mqtt-sessions.db, quic-reset.key) as the broker does, closing what
// opened, and returns the first error.
func openAll(t *testing.T, dir string) error {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenSessions(store.SessionOptions{Dir: dir, Server: mqtt.New(nil), Logger: testutil.DiscardLogger()})
	if err != nil {
		return err
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = store.ResetKey(dir)
	return err
}

// TestUnsafeDataDir: a data directory or file another user could have
// written is refused with an error naming the path and the fix, and a
// symbolic link in the directory is never followed (issue 27 finding 6).
func TestUnsafeDataDir(t *testing.T) {
	// fresh returns a 0700 data directory holding a good broker.db,
	// mqtt-sessions.db and quic-reset.key.
	fresh := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "data")
		if err := openAll(t, dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	chmod := func(t *testing.T, p string, m os.FileMode) {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) (dir string, check func(t *testing.T))
		want  []string // substrings of the error; nil: opens
	}{
		{"0700 dir and 0600 files of the user load", func(t *testing.T) (string, func(*testing.T)) {
			return fresh(t), nil
		}, nil},
		{"world-writable dir", func(t *testing.T) (string, func(*testing.T)) {
			dir := fresh(t)
			chmod(t, dir, 0o777)
			return dir, nil
		}, []string{"is writable by group or others (mode 0777)", "chmod 700 "}},
		{"group-writable new dir", func(t *testing.T) (string, func(*testing.T)) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			chmod(t, dir, 0o770)
			return dir, nil
		}, []string{"mode 0770", "chmod 700 "}},
		{"symlinked sessions file to a new file", func(t *testing.T) (string, func(*testing.T)) {
			dir := fresh(t)
			target := filepath.Join(t.TempDir(), "elsewhere")
			p := filepath.Join(dir, store.SessionsFileName)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			return dir, func(t *testing.T) {
				if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the link's target was created: %v", err)
				}
			}
		}, []string{store.SessionsFileName + " is a symbolic link", "rm "}},
		{"symlinked sessions file to an existing file", func(t *testing.T) (string, func(*testing.T)) {
			dir := fresh(t)
			target := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(target, []byte("keep me\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, store.SessionsFileName)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			return dir, func(t *testing.T) {
				if b, err := os.ReadFile(target); err != nil || string(b) != "keep me\n" {
					t.Errorf("the link's target changed: %q, %v", b, err)
				}
			}
		}, []string{"is a symbolic link"}},
		{"symlinked reset key", func(t *testing.T) (string, func(*testing.T)) {
			dir := fresh(t)
			target := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(target, make([]byte, 32), 0o600); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, store.ResetKeyFileName)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			return dir, nil
		}, []string{store.ResetKeyFileName + " is a symbolic link"}},
		{"group-writable sessions file", func(t *testing.T) (string, func(*testing.T)) {
			dir := fresh(t)
			chmod(t, filepath.Join(dir, store.SessionsFileName), 0o660)
			return dir, nil
		}, []string{store.SessionsFileName + " is writable by group or others (mode 0660)"}},
		{"broker.db of another user", func(t *testing.T) (string, func(*testing.T)) {
			if os.Geteuid() != 0 {
				t.Skip("not root: cannot give a file to another user (os.Chown); the mode cases cover the check")
			}
			dir := fresh(t)
			if err := os.Chown(filepath.Join(dir, store.FileName), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir, nil
		}, []string{store.FileName + " is owned by uid 65534"}},
		{"dir of another user", func(t *testing.T) (string, func(*testing.T)) {
			if os.Geteuid() != 0 {
				t.Skip("not root: cannot give a directory to another user (os.Chown); the mode cases cover the check")
			}
			dir := fresh(t)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir, nil
		}, []string{"is owned by uid 65534"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, check := tt.setup(t)
			err := openAll(t, dir)
			if check != nil {
				check(t)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, safefile.ErrUnsafe) {
				t.Fatalf("opened (or failed otherwise): %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
