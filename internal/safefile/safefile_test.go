package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChecks covers each refusal of the package on its own: modes (by
// stat, so they hold as root too), symbolic links, non-regular files and
// another user's file (root only).
func TestChecks(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, dir string) error
		want string // substring of the error; "": no error
	}{
		{"0700 dir", func(t *testing.T, dir string) error { return CheckDir(dir) }, ""},
		{"0755 dir", func(t *testing.T, dir string) error {
			must(t, os.Chmod(dir, 0o755))
			return CheckDir(dir)
		}, ""},
		{"0777 dir", func(t *testing.T, dir string) error {
			must(t, os.Chmod(dir, 0o777))
			return CheckDir(dir)
		}, "(mode 0777): make it the broker's alone (chmod 700 "},
		{"dir is a file", func(t *testing.T, dir string) error {
			p := filepath.Join(dir, "f")
			must(t, os.WriteFile(p, nil, 0o600))
			return CheckDir(p)
		}, "is not a directory"},
		{"OpenInDir creates a 0600 file", func(t *testing.T, dir string) error {
			f, err := OpenInDir(filepath.Join(dir, "new"), os.O_RDWR|os.O_CREATE, 0o600)
			if err == nil {
				_ = f.Close()
			}
			return err
		}, ""},
		{"OpenInDir refuses a link", func(t *testing.T, dir string) error {
			p := filepath.Join(dir, "link")
			must(t, os.Symlink(filepath.Join(dir, "target"), p))
			f, err := OpenInDir(p, os.O_RDWR|os.O_CREATE, 0o600)
			if err == nil {
				_ = f.Close()
			}
			if _, serr := os.Lstat(filepath.Join(dir, "target")); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("the link's target was created: %v", serr)
			}
			return err
		}, "is a symbolic link"},
		{"OpenInDir refuses a 0606 file", func(t *testing.T, dir string) error {
			p := filepath.Join(dir, "f")
			must(t, os.WriteFile(p, nil, 0o600))
			must(t, os.Chmod(p, 0o606))
			f, err := OpenInDir(p, os.O_RDONLY, 0)
			if err == nil {
				_ = f.Close()
			}
			return err
		}, "(mode 0606)"},
		{"ReadFile refuses a directory", func(t *testing.T, dir string) error {
			_, err := ReadFile(dir)
			return err
		}, "is not a regular file"},
		{"ReadFile refuses another user's file", func(t *testing.T, dir string) error {
			if os.Geteuid() != 0 {
				t.Skip("not root: cannot give a file to another user (os.Chown); the mode cases cover the check")
			}
			p := filepath.Join(dir, "f")
			must(t, os.WriteFile(p, []byte("x"), 0o600))
			must(t, os.Chown(p, 65534, 65534))
			_, err := ReadFile(p)
			return err
		}, "is owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run(t, t.TempDir())
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrUnsafe saying %q", err, tt.want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
