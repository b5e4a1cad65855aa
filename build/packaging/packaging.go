// Package packaging builds quiot's .deb packages with nfpm used as a library:
// the static binary, the systemd units, the sysctl and sysusers drop-ins, the
// default configuration (a conffile) and maintainer scripts that create the
// quiot system user and reload sysctl and systemd. Missing binaries are
// cross-built with `go build`.
package packaging

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/quiot/quiot/build"
)

// Target is one Debian architecture and the Go build that serves it.
type Target struct {
	DebArch string      // Debian architecture: amd64, arm64, armhf
	GOARCH  string      // Go architecture
	GOARM   string      // GOARM for GOARCH=arm
	Binary  string      // binary file name in the binary directory
	Machine elf.Machine // ELF machine the binary must have
	Class   elf.Class   // ELF class the binary must have
}

// Targets are the architectures quiot ships. armhf carries the ARMv6 build,
// which runs on every Raspberry Pi from the Zero and 1 on (Raspberry Pi OS
// calls its 32-bit ARMv6 port armhf too).
var Targets = []Target{
	{DebArch: "amd64", GOARCH: "amd64", Binary: "quiot-linux-amd64", Machine: elf.EM_X86_64, Class: elf.ELFCLASS64},
	{DebArch: "arm64", GOARCH: "arm64", Binary: "quiot-linux-arm64", Machine: elf.EM_AARCH64, Class: elf.ELFCLASS64},
	{DebArch: "armhf", GOARCH: "arm", GOARM: "6", Binary: "quiot-linux-armv6", Machine: elf.EM_ARM, Class: elf.ELFCLASS32},
}

// Options configure Build. The zero value of each field means its default.
type Options struct {
	// Version of the package, e.g. "1.2.0" or a `git describe` string; it is
	// turned into a valid Debian version (see DebVersion). Required.
	Version string
	// Out is the directory the .deb files are written to. Default "dist".
	Out string
	// BinDir holds the binaries named by Target.Binary; missing ones are
	// built there. Default: Out.
	BinDir string
	// Arches are the Debian architectures to build. Default: all Targets.
	Arches []string
	// Rebuild builds the binaries even when BinDir has binaries newer than
	// every source file (make's rule). Reused binaries keep the version they
	// were linked with: after tagging a release, rebuild.
	Rebuild bool
	// KeepBinaries packages binaries found in BinDir as they are, however
	// old; only missing ones are built. Rebuild wins over it.
	KeepBinaries bool
	// RepoRoot is the module root, for `go build` and docs/deploy.md.
	// Default: found by walking up from the working directory to go.mod.
	RepoRoot string
	// Logger receives progress. Default: discard.
	Logger *slog.Logger
	// MTime stamps every file, for reproducible packages. Default: the
	// SOURCE_DATE_EPOCH environment variable, else the current time.
	MTime time.Time
}

func (o *Options) ensureDefaults() error {
	if o.Version == "" {
		return errors.New("version is required")
	}
	if o.Out == "" {
		o.Out = "dist"
	}
	if o.BinDir == "" {
		o.BinDir = o.Out
	}
	if len(o.Arches) == 0 {
		for _, t := range Targets {
			o.Arches = append(o.Arches, t.DebArch)
		}
	}
	if o.RepoRoot == "" {
		root, err := findRepoRoot()
		if err != nil {
			return err
		}
		o.RepoRoot = root
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Build writes one .deb per architecture into opts.Out and returns their
// paths.
func Build(ctx context.Context, opts Options) ([]string, error) {
	if err := opts.ensureDefaults(); err != nil {
		return nil, fmt.Errorf("packaging options: %w", err)
	}
	var targets []Target
	for _, a := range opts.Arches {
		t, ok := targetFor(a)
		if !ok {
			return nil, fmt.Errorf("unknown architecture %q (want amd64, arm64 or armhf)", a)
		}
		targets = append(targets, t)
	}
	for _, d := range []string{opts.Out, opts.BinDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create output directory: %w", err)
		}
	}
	stage, err := os.MkdirTemp("", "quiot-deb-")
	if err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := stageAssets(stage, opts.RepoRoot); err != nil {
		return nil, err
	}
	var out []string
	for _, t := range targets {
		bin := filepath.Join(opts.BinDir, t.Binary)
		if err := ensureBinary(ctx, opts, t, bin); err != nil {
			return nil, err
		}
		p, err := buildDeb(opts, t, bin, stage)
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", t.DebArch, err)
		}
		opts.Logger.Info("package written", "arch", t.DebArch, "file", p)
		out = append(out, p)
	}
	return out, nil
}

func targetFor(debArch string) (Target, bool) {
	for _, t := range Targets {
		if t.DebArch == debArch {
			return t, true
		}
	}
	return Target{}, false
}

// ensureBinary builds bin for t unless it exists (and Rebuild is off), then
// checks that it is an ELF executable for t's machine.
func ensureBinary(ctx context.Context, opts Options, t Target, bin string) error {
	build := opts.Rebuild
	if st, err := os.Stat(bin); err != nil {
		build = true
	} else if !build && !opts.KeepBinaries {
		newest, src, err := newestSource(opts.RepoRoot)
		if err != nil {
			return err
		}
		if newest.After(st.ModTime()) {
			opts.Logger.Info("binary older than the sources, rebuilding", "file", bin, "newer", src)
			build = true
		}
	}
	if build {
		if err := goBuild(ctx, opts, t, bin); err != nil {
			return err
		}
	}
	return checkELF(bin, t)
}

// newestSource returns the modification time of the newest .go file, go.mod
// or go.sum under root (skipping dist, results, testdata and hidden
// directories), as make would judge a binary stale.
func newestSource(root string) (time.Time, string, error) {
	var newest time.Time
	var which string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "dist" || name == "results" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") && name != "go.mod" && name != "go.sum" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(newest) {
			newest, which = info.ModTime(), p
		}
		return nil
	})
	if err != nil {
		return time.Time{}, "", fmt.Errorf("scan sources: %w", err)
	}
	return newest, which, nil
}

// goBuild cross-compiles quiot for t the way the Makefile does.
func goBuild(ctx context.Context, opts Options, t Target, bin string) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return fmt.Errorf("binary path: %w", err)
	}
	opts.Logger.Info("building binary", "arch", t.DebArch, "out", abs)
	ldflags := "-s -w -X github.com/quiot/quiot/internal/version.Version=" + opts.Version
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "netgo,osusergo",
		"-ldflags", ldflags, "-o", abs, "./device")
	cmd.Dir = opts.RepoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+t.GOARCH, "CGO_ENABLED=0")
	if t.GOARM != "" {
		cmd.Env = append(cmd.Env, "GOARM="+t.GOARM)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", t.DebArch, err, stderr.Bytes())
	}
	return nil
}

func checkELF(bin string, t Target) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("binary %s: %w", bin, err)
	}
	defer f.Close()
	if f.Machine != t.Machine || f.Class != t.Class || f.Type != elf.ET_EXEC {
		return fmt.Errorf("binary %s is %v %v %v, want a %v %v executable for %s (remove it to rebuild)",
			bin, f.Class, f.Machine, f.Type, t.Class, t.Machine, t.DebArch)
	}
	return nil
}

// Maintainer scripts. postinst creates the quiot system user (member of
// gpio, created if missing), its state directory, makes the configuration
// readable by quiot only, applies the sysctl drop-in and reloads systemd.
const (
	postinst = `#!/bin/sh
set -e
if [ "$1" = configure ]; then
	getent group gpio >/dev/null 2>&1 || groupadd --system gpio
	if ! getent passwd quiot >/dev/null 2>&1; then
		useradd --system --user-group --home-dir /var/lib/quiot --no-create-home \
			--shell /usr/sbin/nologin --comment "quiot pub-sub over QUIC" quiot
	fi
	usermod --append --groups gpio quiot
	install -d -o quiot -g quiot -m 0750 /var/lib/quiot
	chown root:quiot /etc/quiot /etc/quiot/quiot.toml
	chmod 0750 /etc/quiot
	chmod 0640 /etc/quiot/quiot.toml
	sysctl -q -p /usr/lib/sysctl.d/60-quiot.conf >/dev/null 2>&1 || true
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
		systemctl try-restart quiot-broker.service 'quiot-pub@*.service' 'quiot-sub@*.service' || true
	fi
	if [ -z "$2" ]; then
		echo "quiot: edit /etc/quiot/quiot.toml, then: systemctl enable --now quiot-broker (or quiot-pub@quiot, quiot-sub@quiot)"
	fi
fi
exit 0
`
	prerm = `#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop quiot-broker.service 'quiot-pub@*.service' 'quiot-sub@*.service' || true
	systemctl disable quiot-broker.service || true
fi
exit 0
`
	postrm = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
	rm -rf /var/lib/quiot
fi
exit 0
`
)

// stageAssets writes the embedded assets, the maintainer scripts and the
// docs into dir, where nfpm reads them.
func stageAssets(dir, repoRoot string) error {
	write := func(rel string, data []byte, mode os.FileMode) error {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, data, mode)
	}
	for _, a := range build.Assets() {
		b, err := build.Files.ReadFile(a.Src)
		if err != nil {
			return fmt.Errorf("asset %s: %w", a.Src, err)
		}
		if err := write(a.Src, b, os.FileMode(a.Mode)); err != nil {
			return fmt.Errorf("stage %s: %w", a.Src, err)
		}
	}
	for name, s := range map[string]string{"postinst": postinst, "prerm": prerm, "postrm": postrm} {
		if err := write("scripts/"+name, []byte(s), 0o755); err != nil {
			return fmt.Errorf("stage %s: %w", name, err)
		}
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		doc = []byte("See https://github.com/quiot/quiot/blob/main/docs/deploy.md\n")
	}
	if err := write("doc/deploy.md", doc, 0o644); err != nil {
		return fmt.Errorf("stage docs: %w", err)
	}
	return nil
}

// Contents lists what the package installs, given the staged assets in
// stage and the binary bin.
func Contents(stage, bin string) files.Contents {
	c := files.Contents{
		{Source: bin, Destination: build.BinaryPath, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
		{Source: filepath.Join(stage, "doc/deploy.md"), Destination: "/usr/share/doc/quiot/deploy.md", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Destination: "/etc/quiot", Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
	}
	for _, a := range build.Assets() {
		typ := ""
		if a.Conffile {
			typ = files.TypeConfigNoReplace
		}
		c = append(c, &files.Content{Source: filepath.Join(stage, a.Src), Destination: a.Dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Mode: os.FileMode(a.Mode)}})
	}
	return c
}

func buildDeb(opts Options, t Target, bin, stage string) (string, error) {
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "quiot",
		Arch:          t.DebArch,
		Platform:      "linux",
		Version:       DebVersion(opts.Version),
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    "quiot maintainers <quiot@users.noreply.github.com>",
		Description: "Pub-sub over QUIC (HTTP/3 and MQTT) for small Linux devices\n" +
			"quiot runs as broker, publisher or subscriber of a publish-subscribe\n" +
			"system over QUIC, speaking a pure HTTP/3 pub-sub protocol and MQTT\n" +
			"over QUIC side by side, with lean QUIC tuning for poor links.\n" +
			"Ships systemd units (quiot-broker, quiot-pub@, quiot-sub@).",
		Homepage: "https://github.com/quiot/quiot",
		License:  "Apache-2.0",
		MTime:    opts.MTime,
		Overridables: nfpm.Overridables{
			Depends:  []string{"passwd", "procps"},
			Contents: Contents(stage, bin),
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(stage, "scripts/postinst"),
				PreRemove:   filepath.Join(stage, "scripts/prerm"),
				PostRemove:  filepath.Join(stage, "scripts/postrm"),
			},
		},
	})
	if opts.MTime.IsZero() {
		// WithDefaults took SOURCE_DATE_EPOCH or now.
		opts.MTime = info.MTime
	}
	pkg := deb.Default
	name := filepath.Join(opts.Out, pkg.ConventionalFileName(info))
	tmp, err := os.CreateTemp(opts.Out, ".quiot-*.deb.tmp")
	if err != nil {
		return "", fmt.Errorf("create package file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := pkg.Package(info, tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("nfpm: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write package: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", fmt.Errorf("write package: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return "", fmt.Errorf("write package: %w", err)
	}
	return name, nil
}

var debBad = regexp.MustCompile(`[^A-Za-z0-9.+~]+`)

// DebVersion turns a release or `git describe` string into a valid Debian
// version: a leading "v" is dropped, "-" (which Debian reserves for the
// revision) becomes "+", other invalid characters become ".", and a version
// that does not start like a release (digits, dot, digits), such as a bare
// commit hash, is prefixed with "0.0.0~git" so that it sorts before any
// release.
func DebVersion(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	v = strings.ReplaceAll(v, "-", "+")
	v = debBad.ReplaceAllString(v, ".")
	v = strings.Trim(v, ".+~")
	if v == "" {
		return "0.0.0~dev"
	}
	if !releaseLike.MatchString(v) {
		v = "0.0.0~git" + v
	}
	return v
}

var releaseLike = regexp.MustCompile(`^[0-9]+\.[0-9]+`)

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory")
		}
		dir = parent
	}
}
