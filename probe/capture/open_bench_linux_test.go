//go:build linux

package capture_test

import (
	"github.com/quiot/quiot/probe/netns/netnstest"
	"testing"

	"github.com/quiot/quiot/probe/capture"
)

// BenchmarkOpen is the cost of opening a capture with the default ring.
func BenchmarkOpen(b *testing.B) {
	netnstest.NeedRoot(b)
	for b.Loop() {
		h, err := capture.Open(capture.Options{Interface: "lo"})
		if err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
}
