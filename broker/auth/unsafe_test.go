package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/safefile"
)

// TestLoadRefusesUnsafeFile: an ACL file (users, passwords, rights) that
// another user could have written is refused with an error naming the
// path and the fix; a symbolic link to a safe file is followed (issue 27
// finding 6).
func TestLoadRefusesUnsafeFile(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, p string) string // returns the path to load
		want  []string                            // substrings of the error; nil: loads
	}{
		{"0600 file of the user", func(t *testing.T, p string) string { return p }, nil},
		{"0644 file of the user", func(t *testing.T, p string) string {
			chmodT(t, p, 0o644)
			return p
		}, nil},
		{"world-writable file", func(t *testing.T, p string) string {
			chmodT(t, p, 0o666)
			return p
		}, []string{"acl.toml is writable by group or others (mode 0666)", "chmod go-w "}},
		{"group-writable file", func(t *testing.T, p string) string {
			chmodT(t, p, 0o620)
			return p
		}, []string{"mode 0620", "chmod go-w "}},
		{"symbolic link to a safe file", func(t *testing.T, p string) string {
			l := filepath.Join(t.TempDir(), "link.toml")
			if err := os.Symlink(p, l); err != nil {
				t.Fatal(err)
			}
			return l
		}, nil},
		{"symbolic link to a world-writable file", func(t *testing.T, p string) string {
			chmodT(t, p, 0o666)
			l := filepath.Join(t.TempDir(), "link.toml")
			if err := os.Symlink(p, l); err != nil {
				t.Fatal(err)
			}
			return l
		}, []string{"mode 0666"}},
		{"file of another user", func(t *testing.T, p string) string {
			if os.Geteuid() != 0 {
				t.Skip("not root: cannot give a file to another user (os.Chown); the mode cases cover the check")
			}
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return p
		}, []string{"is owned by uid 65534", "chown "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "acl.toml")
			if err := os.WriteFile(p, []byte(sample), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(tt.setup(t, p))
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, safefile.ErrUnsafe) {
				t.Fatalf("loaded (or failed otherwise): %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func chmodT(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}
