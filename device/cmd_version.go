package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/quiot/quiot/device/hw"
	"github.com/quiot/quiot/internal/version"
)

func init() {
	register(command{name: "version", summary: "print the version, Go, the board detected and the hardware drivers", run: runVersion})
}

// versionInfo is what `quiot version --json` prints.
type versionInfo struct {
	Version string   `json:"version"`
	Go      string   `json:"go"`
	OS      string   `json:"os"`
	Arch    string   `json:"arch"`
	Board   string   `json:"board"`
	Loaded  []string `json:"drivers_loaded"`
	Skipped []string `json:"drivers_skipped"`
	Failed  []string `json:"drivers_failed"`
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	verbose := fs.Bool("v", false, "list skipped drivers with their reasons")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	in, err := hw.Init()
	if err != nil {
		return err
	}
	arch := runtime.GOARCH
	if arch == "arm" {
		arch += goarm()
	}
	v := versionInfo{Version: version.String(), Go: runtime.Version(), OS: runtime.GOOS, Arch: arch,
		Board: in.Board, Loaded: in.Loaded, Skipped: in.Skipped, Failed: in.Failed}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	list := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(stdout, "quiot %s\n", v.Version)
	fmt.Fprintf(stdout, "go:              %s %s/%s\n", v.Go, v.OS, v.Arch)
	fmt.Fprintf(stdout, "board:           %s\n", v.Board)
	fmt.Fprintf(stdout, "drivers loaded:  %s\n", list(v.Loaded))
	if *verbose {
		fmt.Fprintf(stdout, "drivers skipped: %s\n", list(v.Skipped))
	} else {
		fmt.Fprintf(stdout, "drivers skipped: %d (-v lists them)\n", len(v.Skipped))
	}
	fmt.Fprintf(stdout, "drivers failed:  %s\n", list(v.Failed))
	return nil
}

// goarm returns the GOARM the binary was built with ("v6"), when recorded.
func goarm() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "GOARM" {
			return "v" + s.Value
		}
	}
	return ""
}
