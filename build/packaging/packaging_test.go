package packaging

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testenv"
)

func TestDebVersion(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1.2.0", "1.2.0"},
		{"v1.2.0", "1.2.0"},
		{"v1.2.0-3-gabcdef0", "1.2.0+3+gabcdef0"},
		{"v1.2.0-3-gabcdef0-dirty", "1.2.0+3+gabcdef0+dirty"},
		{"92ed2ad-dirty", "0.0.0~git92ed2ad+dirty"},
		{"abcdef0", "0.0.0~gitabcdef0"},
		{"dev", "0.0.0~gitdev"},
		{"", "0.0.0~dev"},
		{"1.0 beta/2", "1.0.beta.2"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := DebVersion(tc.in); got != tc.want {
				t.Errorf("DebVersion(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Build(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("no version: %v", err)
	}
	if _, err := Build(ctx, Options{Version: "1.0.0", Arches: []string{"sparc"}, Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "sparc") {
		t.Errorf("bad arch: %v", err)
	}
	// A binary of the wrong architecture is refused, not packaged.
	self, _ := os.Executable()
	if runtime.GOARCH != "arm64" {
		tg, _ := targetFor("arm64")
		if err := checkELF(self, tg); err == nil || !strings.Contains(err.Error(), "want a") {
			t.Errorf("wrong-arch binary: %v", err)
		}
	}
}

// binaries collects the binaries `make build` / `make pi` / `make arm64`
// already produced in dist/, so the test packages real builds without
// compiling again. amd64 is always packaged (built if dist/ lacks it); the
// ARM packages are tested when their binary is in dist/ (`make test` runs
// `make pi` first) or when QUIOT_DEB_ALL=1 asks to build them.
func binaries(t *testing.T, root, binDir string) []string {
	t.Helper()
	arches := []string{"amd64"}
	if runtime.GOARCH == "amd64" {
		if _, err := os.Stat(filepath.Join(root, "dist/quiot")); err == nil {
			copyFile(t, filepath.Join(root, "dist/quiot"), filepath.Join(binDir, "quiot-linux-amd64"))
		}
	}
	all := os.Getenv("QUIOT_DEB_ALL") == "1"
	for _, tg := range Targets[1:] {
		src := filepath.Join(root, "dist", tg.Binary)
		if _, err := os.Stat(src); err == nil {
			copyFile(t, src, filepath.Join(binDir, tg.Binary))
			arches = append(arches, tg.DebArch)
		} else if all {
			arches = append(arches, tg.DebArch)
		} else {
			t.Logf("not packaging %s: %s missing (run make pi / make arm64, or QUIOT_DEB_ALL=1)", tg.DebArch, src)
		}
	}
	return arches
}

func TestPackages(t *testing.T) {
	dpkgDeb := testenv.RequireTool(t, "dpkg-deb")
	if testing.Short() {
		t.Skip("-short: packaging builds binaries")
	}
	root, err := findRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, out := t.TempDir(), t.TempDir()
	arches := binaries(t, root, binDir)
	version := "v1.2.3-4-gabcdef0"
	dv := DebVersion(version)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	debs, err := Build(ctx, Options{Version: version, Out: out, BinDir: binDir, Arches: arches, KeepBinaries: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if len(debs) != len(arches) {
		t.Fatalf("got %d packages for %v", len(debs), arches)
	}
	run := func(args ...string) string {
		t.Helper()
		var o, e bytes.Buffer
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, e.Bytes())
		}
		return o.String()
	}
	for i, deb := range debs {
		arch := arches[i]
		t.Run(arch, func(t *testing.T) {
			if want := "quiot_" + dv + "_" + arch + ".deb"; filepath.Base(deb) != want {
				t.Errorf("file %s, want %s", filepath.Base(deb), want)
			}
			info := run(dpkgDeb, "-I", deb)
			for _, want := range []string{"Package: quiot", "Architecture: " + arch, "Version: " + dv,
				"Depends: passwd", "postinst", "prerm", "postrm", "conffiles"} {
				if !strings.Contains(info, want) {
					t.Errorf("dpkg-deb -I lacks %q:\n%s", want, info)
				}
			}
			if conf := run(dpkgDeb, "-I", deb, "conffiles"); strings.TrimSpace(conf) != "/etc/quiot/quiot.toml" {
				t.Errorf("conffiles = %q", conf)
			}
			post := run(dpkgDeb, "-I", deb, "postinst")
			for _, want := range []string{"useradd --system", "quiot", "sysctl", "daemon-reload"} {
				if !strings.Contains(post, want) {
					t.Errorf("postinst lacks %q", want)
				}
			}
			list := run(dpkgDeb, "-c", deb)
			for _, want := range []string{
				"-rwxr-xr-x root/root .* ./usr/bin/quiot$",
				"-rw-r--r-- root/root .* ./usr/lib/systemd/system/quiot-broker.service$",
				"-rw-r--r-- root/root .* ./usr/lib/systemd/system/quiot-pub@.service$",
				"-rw-r--r-- root/root .* ./usr/lib/systemd/system/quiot-sub@.service$",
				"-rw-r--r-- root/root .* ./usr/lib/sysctl.d/60-quiot.conf$",
				"-rw-r--r-- root/root .* ./usr/lib/sysusers.d/quiot.conf$",
				"-rw-r--r-- root/root .* ./etc/quiot/quiot.toml$",
				"-rw-r--r-- root/root .* ./usr/share/doc/quiot/deploy.md$",
			} {
				if !matchLine(list, want) {
					t.Errorf("dpkg-deb -c has no line matching %q:\n%s", want, list)
				}
			}
		})
	}
	t.Run("amd64 unpacked", func(t *testing.T) {
		scratch := t.TempDir()
		run(dpkgDeb, "-x", debs[0], scratch)
		ctl := t.TempDir()
		run(dpkgDeb, "-e", debs[0], ctl)
		for _, f := range []struct {
			path string
			mode os.FileMode
		}{
			{"usr/bin/quiot", 0o755},
			{"usr/lib/systemd/system/quiot-broker.service", 0o644},
			{"usr/lib/systemd/system/quiot-pub@.service", 0o644},
			{"usr/lib/systemd/system/quiot-sub@.service", 0o644},
			{"usr/lib/sysctl.d/60-quiot.conf", 0o644},
			{"usr/lib/sysusers.d/quiot.conf", 0o644},
			{"etc/quiot/quiot.toml", 0o644},
			{"usr/share/doc/quiot/deploy.md", 0o644},
		} {
			st, err := os.Stat(filepath.Join(scratch, f.path))
			if err != nil {
				t.Error(err)
				continue
			}
			if st.Mode() != f.mode {
				t.Errorf("%s mode %v, want %v", f.path, st.Mode(), f.mode)
			}
		}
		ef, err := elf.Open(filepath.Join(scratch, "usr/bin/quiot"))
		if err != nil {
			t.Fatal(err)
		}
		if ef.Machine != elf.EM_X86_64 {
			t.Errorf("amd64 package carries a %v binary", ef.Machine)
		}
		ef.Close()
		// The unpacked binary runs, and the maintainer scripts parse.
		if runtime.GOARCH == "amd64" {
			out := run(filepath.Join(scratch, "usr/bin/quiot"), "--help")
			if !strings.Contains(out, "quiot") {
				t.Errorf("quiot --help: %q", out)
			}
		}
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			run("sh", "-n", filepath.Join(ctl, s))
		}
	})
}

func matchLine(text, pattern string) bool {
	for _, line := range strings.Split(text, "\n") {
		if ok, _ := regexp.MatchString(pattern, line); ok {
			return true
		}
	}
	return false
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestNewestSource(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{"go.mod", "a/a.go", "dist/x.go", ".git/y.go", "a/readme.md"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	newer := old.Add(time.Minute)
	if err := os.Chtimes(filepath.Join(root, "a/a.go"), newer, newer); err != nil {
		t.Fatal(err)
	}
	later := newer.Add(time.Minute) // ignored: dist, hidden, not Go
	for _, f := range []string{"dist/x.go", ".git/y.go", "a/readme.md"} {
		if err := os.Chtimes(filepath.Join(root, f), later, later); err != nil {
			t.Fatal(err)
		}
	}
	got, which, err := newestSource(root)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(newer) || filepath.Base(which) != "a.go" {
		t.Errorf("newest %v %s, want %v a.go", got, which, newer)
	}
}
