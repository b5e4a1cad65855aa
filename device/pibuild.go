//go:build arm || nobench

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// The 32-bit ARM build (`make pi`, the Raspberry Pi Zero binary, budget
// 12,000,000 bytes), and any build with the tag nobench (`go build -tags
// nobench`, e.g. an arm64 device or the amd64 measurement of what a device
// publisher holds, docs/BENCH.md), leave out what only a host runs:
//
//   - `quiot bench` (device/bench: the orchestrator that starts the roles as
//     processes behind the userspace link emulator, the statistics, report.md,
//     TUNING.md, the tuning study and the progress bar): about 720 KB of the
//     ARMv6 binary. The roles it runs (broker, pub and sub with
//     --metrics-out) are all in the Pi build.
//   - `quiot bench-reconnect` (the reconnect workload of the bench).
//   - the quick bench that `quiot demo` runs after its live part; the live
//     part (broker, subscriber and publisher on loopback) is in.
//
// Besides the bytes, a publisher on a device then no longer runs their
// package inits (goldmark builds its tables at init; gonum's statistics, the
// progress bar) nor maps their pages: on amd64 `quiot pub` holds about
// 13.8 MB instead of 16.5 MB (docs/BENCH.md). Run those on a host (a build
// without the tag). bench_host.go is the other side.
const benchBuiltIn = false

// errNotInPiBuild is what a left-out command answers.
var errNotInPiBuild = errors.New("not in the Pi build (32-bit ARM, or built with -tags nobench); run it on a host (a quiot built without the tag)")

func init() {
	register(command{
		name:    "bench",
		summary: "(not in the Pi build: run it on a host) the HTTP/3 vs MQTT-over-QUIC experiment",
		run:     runBench,
	})
	register(command{
		name:    "bench-reconnect",
		summary: "(not in the Pi build: run it on a host) the reconnect workload of the bench",
		run:     runBench,
	})
}

// runBench stands in for `quiot bench` in the Pi build (and
// `quiot bench-reconnect`).
func runBench(context.Context, []string, io.Writer, io.Writer) error {
	return fmt.Errorf("%w; the broker, pub and sub roles it runs are in this build", errNotInPiBuild)
}
