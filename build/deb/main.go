// Command deb builds quiot's .deb packages for amd64, arm64 and armhf:
//
//	go run ./build/deb --version 1.2.0 --out dist [--arch amd64,arm64,armhf] [--rebuild]
//
// Binaries missing from --bin (default: --out) are cross-built first.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/quiot/quiot/build/packaging"
)

func main() {
	var (
		opts  packaging.Options
		arch  string
		fs    = flag.NewFlagSet("deb", flag.ExitOnError)
		names []string
	)
	for _, t := range packaging.Targets {
		names = append(names, t.DebArch)
	}
	fs.StringVar(&opts.Version, "version", "", "package version (required; a git describe string is fine)")
	fs.StringVar(&opts.Out, "out", "dist", "output directory for the .deb files")
	fs.StringVar(&opts.BinDir, "bin", "", "directory with quiot-linux-{amd64,arm64,armv6}; missing ones, and ones older than the sources, are built (default: --out)")
	fs.StringVar(&arch, "arch", strings.Join(names, ","), "Debian architectures to package")
	fs.BoolVar(&opts.Rebuild, "rebuild", false, "build the binaries even if present")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 || opts.Version == "" {
		fmt.Fprintln(os.Stderr, "usage: go run ./build/deb --version V [--out DIR] [--arch LIST] [--bin DIR] [--rebuild]")
		os.Exit(2)
	}
	opts.Arches = strings.Split(arch, ",")
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	debs, err := packaging.Build(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deb:", err)
		os.Exit(1)
	}
	for _, d := range debs {
		fmt.Println(d)
	}
}
