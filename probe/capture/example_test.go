package capture_test

import (
	"context"
	"fmt"
	"time"

	"github.com/quiot/quiot/probe/capture"
)

// Capture UDP port 4433 packets leaving eth0 for ten seconds and report the
// ring's drops.
func ExampleOpen() {
	h, err := capture.Open(capture.Options{
		Interface: "eth0",
		Direction: capture.Out,
		Filter:    capture.UDPFilter(4433, capture.EitherPort),
	})
	if err != nil {
		fmt.Println(err) // e.g. not root: "... (needs root or CAP_NET_RAW)"
		return
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	_ = h.Run(ctx, func(p *capture.Packet) { n++ })
	st, _ := h.Stats()
	fmt.Println(n, "packets,", st.Drops, "dropped by the ring")
}
