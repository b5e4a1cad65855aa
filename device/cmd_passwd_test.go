package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/auth"
)

// TestTokenCommand is issue 9 finding 6's command: the token is printed
// once, only its SHA-256 reaches the file, which loads and authenticates.
func TestTokenCommand(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "etc", "acl.toml")
	var out, errb bytes.Buffer
	if code := run([]string{"token", "--acl", acl, "--expires", "90d", "--note", "kitchen", "sensor-1"}, &out, &errb); code != 0 {
		t.Fatalf("token: exit %d: %s", code, errb.String())
	}
	tok := strings.TrimSpace(out.String())
	if strings.Count(out.String(), "\n") != 1 || !strings.HasPrefix(tok, auth.TokenPrefix) {
		t.Fatalf("stdout %q: want the token alone on one line", out.String())
	}
	if !strings.Contains(errb.String(), "no rights") {
		t.Errorf("stderr does not say the new user has no rights: %s", errb.String())
	}
	// A second token, name first then flags: the user is not added again.
	out.Reset()
	if code := run([]string{"token", "sensor-1", "--acl", acl}, &out, &errb); code != 0 {
		t.Fatalf("second token: exit %d: %s", code, errb.String())
	}
	tok2 := strings.TrimSpace(out.String())
	b, err := os.ReadFile(acl)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(tok)) || bytes.Contains(b, []byte(tok2)) {
		t.Fatalf("token written to the file:\n%s", b)
	}
	if n := bytes.Count(b, []byte("\n[[user]]\n")); n != 1 {
		t.Errorf("%d [[user]] entries, want 1:\n%s", n, b)
	}
	if st, err := os.Stat(acl); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("ACL file mode %v (%v), want 0640", st.Mode(), err)
	}
	a, err := auth.Load(acl)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{tok, tok2} {
		if id, ok := a.Token(s); !ok || id != "sensor-1" {
			t.Errorf("Token = %q %v", id, ok)
		}
	}
	if !a.NextExpiry().After(time.Now().Add(89 * 24 * time.Hour)) {
		t.Errorf("expiry %v, want 90 days ahead", a.NextExpiry())
	}
}

func TestPasswdCommand(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(acl, []byte("# mine\n[[user]]\nname = \"alice\"\npublish = [\"a/#\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"passwd", "--acl", acl, "--cost", "4", "alice"}, &out, &errb); code != 0 {
		t.Fatalf("passwd: exit %d: %s", code, errb.String())
	}
	pw := strings.TrimSpace(out.String())
	defer func(r interface{ Read([]byte) (int, error) }) { passwdStdin = r }(passwdStdin)
	passwdStdin = strings.NewReader("chosen secret\n")
	out.Reset()
	if code := run([]string{"passwd", "--acl", acl, "--cost", "4", "--stdin", "alice"}, &out, &errb); code != 0 {
		t.Fatalf("passwd --stdin: exit %d: %s", code, errb.String())
	}
	if out.Len() != 0 {
		t.Errorf("a chosen password echoed: %q", out.String())
	}
	b, _ := os.ReadFile(acl)
	if bytes.Contains(b, []byte(pw)) || bytes.Contains(b, []byte("chosen secret")) || !bytes.HasPrefix(b, []byte("# mine\n")) {
		t.Fatalf("file:\n%s", b)
	}
	if st, _ := os.Stat(acl); st.Mode().Perm() != 0o600 {
		t.Errorf("mode changed to %v", st.Mode())
	}
	a, err := auth.Load(acl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pw, "chosen secret"} {
		if id, ok := a.Basic("alice", p); !ok || id != "alice" {
			t.Errorf("Basic(alice, %q) = %q %v", p, id, ok)
		}
	}
}

func TestPasswdConvert(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl.toml")
	old := "[[user]]\nname = \"s1\"\ntoken = \"old-token\"\npassword = \"old-pw\"\npublish = [\"s/#\"]\n"
	if err := os.WriteFile(acl, []byte(old), 0o640); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	if code := run([]string{"passwd", "--convert", "--cost", "4", "--acl", acl}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errb.String())
	}
	b, _ := os.ReadFile(acl)
	if bytes.Contains(b, []byte("old-token")) || bytes.Contains(b, []byte("old-pw")) {
		t.Fatalf("plain text left:\n%s", b)
	}
	a, err := auth.Load(acl)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings()) != 0 {
		t.Errorf("warnings: %q", a.Warnings())
	}
	if id, ok := a.Token("old-token"); !ok || id != "s1" {
		t.Error("converted token refused")
	}
	if id, ok := a.Basic("s1", "old-pw"); !ok || id != "s1" {
		t.Error("converted password refused")
	}
	if st, _ := os.Stat(acl); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", st.Mode())
	}
}

func TestCredentialCommandErrors(t *testing.T) {
	dir := t.TempDir()
	acl := filepath.Join(dir, "acl.toml")
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"no acl", []string{"token", "x"}, 2},
		{"no name", []string{"token", "--acl", acl}, 2},
		{"wildcard name", []string{"token", "--acl", acl, "#"}, 2},
		{"slash name", []string{"passwd", "--acl", acl, "a/b"}, 2},
		{"colon in password user", []string{"passwd", "--acl", acl, "a:b"}, 2},
		{"past expiry", []string{"token", "--acl", acl, "--expires", "2001-01-01", "x"}, 2},
		{"bad expiry", []string{"token", "--acl", acl, "--expires", "soon", "x"}, 2},
		{"bad cost", []string{"passwd", "--acl", acl, "--cost", "99", "x"}, 2},
		{"convert with a name", []string{"passwd", "--convert", "--acl", acl, "x"}, 2},
		{"convert missing file", []string{"passwd", "--convert", "--acl", acl}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := run(tc.args, &bytes.Buffer{}, &bytes.Buffer{}); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
		})
	}
	if _, err := os.Stat(acl); err == nil {
		t.Error("a refused command wrote the ACL file")
	}
	// A broken file is left alone.
	if err := os.WriteFile(acl, []byte("[[user]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"token", "--acl", acl, "x"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("token on a broken file: exit %d, want 1", code)
	}
	if b, _ := os.ReadFile(acl); string(b) != "[[user]\n" {
		t.Errorf("broken file changed: %q", b)
	}
}

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 500, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"", time.Time{}, true},
		{"90d", time.Date(2027, 3, 1, 10, 0, 1, 0, time.UTC), true},
		{"36h", time.Date(2026, 12, 2, 22, 0, 1, 0, time.UTC), true},
		{"2027-06-30", time.Date(2027, 6, 30, 0, 0, 0, 0, time.UTC), true},
		{"2027-06-30T12:00:00+02:00", time.Date(2027, 6, 30, 10, 0, 0, 0, time.UTC), true},
		{"2026-11-30", time.Time{}, false},
		{"-5h", time.Time{}, false},
		{"0d", time.Time{}, false},
		{"tomorrow", time.Time{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseExpiry(tc.in, now)
			if (err == nil) != tc.ok || !got.Equal(tc.want) {
				t.Fatalf("parseExpiry(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}
