//go:build arm

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// The 32-bit ARM build (`make pi`, the Raspberry Pi Zero binary, budget
// 12,000,000 bytes) leaves out what only a host runs:
//
//   - `quiot bench` (device/bench: the orchestrator that starts the roles as
//     processes behind the userspace link emulator, the statistics, report.md,
//     TUNING.md, the tuning study and the progress bar): about 720 KB of the
//     ARMv6 binary. The roles it runs (broker, pub and sub with
//     --metrics-out) are all in the Pi build.
//   - the quick bench that `quiot demo` runs after its live part; the live
//     part (broker, subscriber and publisher on loopback) is in.
//
// Run those on a host (amd64 or arm64). bench_host.go is the other side.
const benchBuiltIn = false

// errNotInPiBuild is what a left-out command answers.
var errNotInPiBuild = errors.New("not in the Pi build (32-bit ARM); run it on a host (amd64 or arm64 build of quiot)")

func init() {
	register(command{
		name:    "bench",
		summary: "(not in the Pi build: run it on a host) the HTTP/3 vs MQTT-over-QUIC experiment",
		run:     runBench,
	})
}

// runBench stands in for `quiot bench` in the Pi build.
func runBench(context.Context, []string, io.Writer, io.Writer) error {
	return fmt.Errorf("%w; the broker, pub and sub roles it runs are in this build", errNotInPiBuild)
}
