package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quiot/quiot/broker/auth"
)

// `quiot token` and `quiot passwd` make credentials for the broker's ACL
// file (issue 9 finding 6): the secret is printed once on stdout and only
// its hash is written to the file (SHA-256 for tokens, bcrypt for
// passwords). `quiot passwd --convert` hashes the plain-text credentials of
// an older file in place.

func init() {
	register(command{
		name:    "token",
		summary: "make a bearer token for an identity: print it once, write its SHA-256 to the ACL file",
		run:     runToken,
	})
	register(command{
		name:    "passwd",
		summary: "make a password for a user: print it once, write its bcrypt hash to the ACL file (--convert: hash an old file's plain-text credentials)",
		run:     runPasswd,
	})
}

// passwdStdin is what `quiot passwd --stdin` reads; tests replace it.
var passwdStdin io.Reader = os.Stdin

const aclHeader = `# quiot broker ACL (quiot broker --auth FILE; SIGHUP reloads it).
# Identities: [[user]] entries with publish and subscribe patterns (MQTT
# filters; %u = the identity). Credentials: only hashes, written by
# 'quiot token --acl FILE NAME' and 'quiot passwd --acl FILE NAME'.
# Clients without credentials are refused unless an [anonymous] table
# gives them patterns. See docs/security.md.
`

// credFlags are the flags shared by token and passwd.
type credFlags struct {
	acl     string
	expires string
	note    string
}

func (c *credFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.acl, "acl", "", "ACL file to add the credential to (created, mode 0640, if missing); required")
	fs.StringVar(&c.expires, "expires", "", "end of validity: a date (2027-06-30), an RFC 3339 time, or a duration from now (720h, 90d); empty = never")
	fs.StringVar(&c.note, "note", "", "free text kept beside the hash (who, what for)")
}

// parseCredArgs parses args with the NAME either first or last (after the
// flags; the flag parser takes no positional arguments).
func parseCredArgs(fs *flag.FlagSet, args []string, wantName bool) (name string, err error) {
	switch {
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		name, args = args[0], args[1:]
	case wantName && len(args) > 0 && !strings.HasPrefix(args[len(args)-1], "-") && !takesValue(fs, args[:len(args)-1]):
		name, args = args[len(args)-1], args[:len(args)-1]
	}
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if wantName && name == "" {
		return "", fmt.Errorf("%w: give the identity NAME", errUsage)
	}
	if !wantName && name != "" {
		return "", fmt.Errorf("%w: --convert takes no NAME", errUsage)
	}
	return name, nil
}

// takesValue reports whether the last of args is a flag of fs that takes
// the next argument as its value (-acl FILE, not -stdin or -acl=FILE).
func takesValue(fs *flag.FlagSet, args []string) bool {
	if len(args) == 0 {
		return false
	}
	last := args[len(args)-1]
	if !strings.HasPrefix(last, "-") || strings.Contains(last, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimLeft(last, "-"))
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// parseExpiry reads --expires relative to now: "" (never), a date
// (midnight UTC), an RFC 3339 time, or a duration (Go syntax, or Nd days).
func parseExpiry(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	var t time.Time
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return time.Time{}, fmt.Errorf("bad --expires %q: want a positive number of days, e.g. 90d", s)
		}
		t = now.Add(time.Duration(n) * 24 * time.Hour)
	} else if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("bad --expires %q: want a positive duration", s)
		}
		t = now.Add(d)
	} else if t, err = time.Parse("2006-01-02", s); err != nil {
		if t, err = time.Parse(time.RFC3339, s); err != nil {
			return time.Time{}, fmt.Errorf("bad --expires %q: want a date (2027-06-30), an RFC 3339 time or a duration (720h, 90d)", s)
		}
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("--expires %q is in the past", s)
	}
	// The file keeps whole seconds (RFC 3339); round up so the credential
	// never expires before the time asked for.
	t = t.UTC()
	if t.Nanosecond() != 0 {
		t = t.Truncate(time.Second).Add(time.Second)
	}
	return t, nil
}

func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", stderr)
	var cf credFlags
	cf.register(fs)
	name, err := parseCredArgs(fs, args, true)
	if err != nil {
		return err
	}
	if cf.acl == "" {
		return fmt.Errorf("%w: --acl FILE is required", errUsage)
	}
	exp, err := parseExpiry(cf.expires, time.Now())
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := auth.ValidIdentity(name); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	secret, t := auth.NewToken(name, exp, cf.note)
	newUser, err := appendCredential(cf.acl, name, t.TOML())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "wrote the SHA-256 of a new token for %q to %s; the token above is shown once and stored nowhere\n", name, cf.acl)
	credHints(stderr, cf.acl, name, newUser)
	return nil
}

func runPasswd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("passwd", stderr)
	var cf credFlags
	cf.register(fs)
	convert := fs.Bool("convert", false, "replace the plain-text token/password lines of --acl by their hashes (devices keep their secrets); no NAME")
	fromStdin := fs.Bool("stdin", false, "read the password from the first line of standard input instead of making a random one")
	cost := fs.Int("cost", auth.DefaultCost, "bcrypt cost (4..31; each step doubles the time; see docs/security.md)")
	name, err := parseCredArgs(fs, args, !hasFlag(args, "convert"))
	if err != nil {
		return err
	}
	if cf.acl == "" {
		return fmt.Errorf("%w: --acl FILE is required", errUsage)
	}
	if *convert {
		return convertACL(cf.acl, *cost, stderr)
	}
	exp, err := parseExpiry(cf.expires, time.Now())
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := auth.ValidIdentity(name); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if strings.Contains(name, ":") {
		return fmt.Errorf("%w: a user name with a password must not contain ':'", errUsage)
	}
	secret := auth.RandomPassword()
	if *fromStdin {
		line, err := bufio.NewReader(passwdStdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("couldn't read the password from standard input: %w", err)
		}
		secret = strings.TrimRight(line, "\r\n")
		if secret == "" {
			return fmt.Errorf("%w: empty password on standard input", errUsage)
		}
		if len(secret) > 72 {
			return fmt.Errorf("%w: password longer than 72 bytes (bcrypt reads no further)", errUsage)
		}
	}
	p, err := auth.NewPassword(name, secret, *cost, exp, cf.note)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	newUser, err := appendCredential(cf.acl, name, p.TOML())
	if err != nil {
		return err
	}
	if !*fromStdin {
		fmt.Fprintln(stdout, secret)
		fmt.Fprintf(stderr, "wrote the bcrypt hash of a new password for %q to %s; the password above is shown once and stored nowhere\n", name, cf.acl)
	} else {
		fmt.Fprintf(stderr, "wrote the bcrypt hash of the password for %q to %s\n", name, cf.acl)
	}
	fmt.Fprintf(stderr, "older passwords of %q stay valid until you delete their [[password]] entries\n", name)
	credHints(stderr, cf.acl, name, newUser)
	return nil
}

// hasFlag reports whether args set the boolean flag name (before the
// flags are parsed).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || a == name+"=true" {
			return true
		}
	}
	return false
}

func credHints(w io.Writer, acl, name string, newUser bool) {
	if newUser {
		fmt.Fprintf(w, "added [[user]] %q with no rights: give it publish and subscribe patterns in %s\n", name, acl)
	}
	fmt.Fprintf(w, "a running broker takes the change on SIGHUP (systemctl reload quiot-broker)\n")
}

// appendCredential adds entry (and a [[user]] for name when missing) to the
// ACL file, creating it (0640) when it does not exist. Only the new text
// is appended: the file keeps its comments, owner and mode.
func appendCredential(path, name, entry string) (newUser bool, err error) {
	src, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		src = nil
	case err != nil:
		return false, fmt.Errorf("couldn't read ACL file: %w", err)
	}
	created := src == nil
	if created {
		src = []byte(aclHeader)
	}
	out, newUser, err := auth.Append(src, name, entry)
	if err != nil {
		return false, fmt.Errorf("ACL file %s: %w", path, err)
	}
	if created {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return false, fmt.Errorf("couldn't make the ACL file's directory: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			return false, fmt.Errorf("couldn't create ACL file: %w", err)
		}
		if _, err := f.Write(out); err != nil {
			f.Close()
			return false, fmt.Errorf("couldn't write ACL file: %w", err)
		}
		return newUser, f.Close()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return false, fmt.Errorf("couldn't open ACL file: %w", err)
	}
	if _, err := f.Write(out[len(src):]); err != nil {
		f.Close()
		return false, fmt.Errorf("couldn't append to ACL file: %w", err)
	}
	return newUser, f.Close()
}

// convertACL rewrites path with its plain-text credentials hashed, through
// a temporary file renamed over it with the same mode and owner.
func convertACL(path string, cost int, stderr io.Writer) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("couldn't read ACL file: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("couldn't stat ACL file: %w", err)
	}
	out, n, err := auth.Convert(src, cost)
	if err != nil {
		return fmt.Errorf("ACL file %s: %w", path, err)
	}
	if n == 0 {
		fmt.Fprintf(stderr, "%s holds no plain-text credentials: nothing to convert\n", path)
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("couldn't write ACL file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return fmt.Errorf("couldn't write ACL file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("couldn't write ACL file: %w", err)
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		tmp.Close()
		return fmt.Errorf("couldn't set the ACL file's mode: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		// Keep root:quiot; only root may give a file away, and a
		// non-root owner keeps its own file anyway.
		if err := tmp.Chown(int(sys.Uid), int(sys.Gid)); err != nil && os.Geteuid() == 0 {
			tmp.Close()
			return fmt.Errorf("couldn't keep the ACL file's owner: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("couldn't write ACL file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("couldn't replace ACL file: %w", err)
	}
	fmt.Fprintf(stderr, "hashed %d plain-text credential(s) in %s; devices keep their tokens and passwords; reload the broker (SIGHUP)\n", n, path)
	return nil
}
