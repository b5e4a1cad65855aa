package client

import (
	"testing"
	"time"

	"github.com/quiot/quiot/internal/probehold"
	"github.com/quiot/quiot/internal/quictune"
)

// TestProbeGovernorFromProfile: the governor is under the client's QUIC
// transport (below the 0-RTT gate), holding for 1.5 x the tuning's handshake_rtt, or
// Options.HandshakeRTT, which wins over it, or coldProbeHold without
// either. It copies first flights when the profile has
// first_flight_copies and an RTT is known.
func TestProbeGovernorFromProfile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		profile  time.Duration
		opt      time.Duration
		noCopies bool // first_flight_copies = false
		wantHold time.Duration
		governed bool
		copies   bool
	}{
		{"none known", 0, 0, false, coldProbeHold, true, false},
		{"profile", time.Second, 0, false, 1500 * time.Millisecond, true, true},
		{"option wins", time.Second, 2 * time.Second, false, 3 * time.Second, true, true},
		{"no copies in the profile", time.Second, 0, true, 1500 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := quictune.Lean()
			p.HandshakeRTT = quictune.Duration(tc.profile)
			p.FirstFlightCopies = !tc.noCopies
			c, err := New(Options{Broker: "https://127.0.0.1:4433", Tuning: p, HandshakeRTT: tc.opt})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tr, err := c.(*h3Client).transport()
			if err != nil {
				t.Fatal(err)
			}
			pc := tr.Conn
			if gc, ok := pc.(*gateConn); ok { // the 0-RTT gate sits above it (zerortt_gate.go)
				pc = gc.PacketConn
			}
			g, ok := pc.(*probehold.Conn)
			if ok != tc.governed || (ok && g.Hold() != tc.wantHold) {
				t.Fatalf("governed %v (%T), want %v with hold %v", ok, tr.Conn, tc.governed, tc.wantHold)
			}
			if ok && g.FirstFlightCopies() != tc.copies {
				t.Fatalf("first-flight copies %v, want %v", g.FirstFlightCopies(), tc.copies)
			}
		})
	}
}
