package bench

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/quictune"
)

// TestReconnectWorkload runs three wake-ups over the lan profile with real
// broker and client: the first is a cold start, the later ones resume the
// session (HTTP/3: and publish in 0-RTT data, lean's default). Under the
// race detector too: the client opens its 0-RTT streams before quic-go reads
// the broker's transport parameters (device/client's zeroRTTGate, quic-go
// issue 4303).
func TestReconnectWorkload(t *testing.T) {
	for _, proto := range []string{ProtoH3, ProtoMQTT} {
		t.Run(proto, func(t *testing.T) { testReconnect(t, proto) })
	}
}

func testReconnect(t *testing.T, proto string) {
	link, err := NewImpairLink()
	if err != nil {
		t.Fatal(err)
	}
	tun := quictune.Lean()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, err := Reconnect(ctx, ReconnectOptions{Link: link, Profile: "lan", Proto: proto, Tuning: tun, Wakeups: 3, Sleep: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("%d wake-ups", len(ws))
	}
	if ws[0].Used0RTT {
		t.Error("cold start used 0-RTT")
	}
	for i, w := range ws {
		if w.Bytes <= 0 || w.Datagrams <= 0 || w.TTFDMs <= 0 {
			t.Errorf("wake-up %d: %+v", i+1, w)
		}
		// The floor comes from the wake-up's own datagrams: the cold
		// construction needs the broker's Initial/Handshake flight and the
		// client's first 1-RTT datagram, classified from the wire.
		if w.Floor == nil || len(w.Trace) != int(w.Datagrams) {
			t.Errorf("wake-up %d: no floor from its %d datagrams: %+v", i+1, len(w.Trace), w.Trace)
		}
		if proto == ProtoH3 && i > 0 && tun.Allow0RTT && !w.Used0RTT {
			t.Errorf("wake-up %d did not use 0-RTT", i+1)
		}
		// Lean holds the handshake probes by default, from the RTT the
		// previous wake-up recorded in the session file.
		switch {
		case proto != ProtoH3:
		case i == 0 && (w.HoldMs != 0 || w.HoldFromSession):
			t.Errorf("cold wake-up held its probes for %v ms", w.HoldMs)
		case i > 0 && (w.HoldMs <= 0 || !w.HoldFromSession):
			t.Errorf("wake-up %d: hold %v ms, from the session file %v; want the previous wake-up's RTT", i+1, w.HoldMs, w.HoldFromSession)
		}
	}
}

// TestDefaultReconnectVariants: the list compares lean's automatic probe
// hold (the RTT from the session file) with HTTP/3 without it.
func TestDefaultReconnectVariants(t *testing.T) {
	var auto, off bool
	for _, v := range DefaultReconnectVariants() {
		if v.ProbeHold {
			t.Errorf("%s: a hand-set hold", v.Name)
		}
		if v.Proto == ProtoH3 && v.ZeroRTT {
			auto = auto || v.SessionRTT
			off = off || !v.SessionRTT
		}
	}
	if !auto || !off {
		t.Fatalf("HTTP/3 0-RTT variants with the session file's hold %v, without %v: want both", auto, off)
	}
}

func TestAppLatency(t *testing.T) {
	pub := &RoleDoc{StampDelays: []float64{900, 0, 0}}
	for _, tc := range []struct {
		name     string
		lat      []float64
		pub      *RoleDoc
		p50, max float64
	}{
		{"first waited for the connection", []float64{100, 100, 100, 100}, pub, 100, 1000},
		{"no publisher waits", []float64{200, 200, 200}, nil, 200, 200},
		{"no latencies", nil, pub, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appLatency(tc.lat, tc.pub)
			if got.P50 != tc.p50 || got.Max != tc.max {
				t.Fatalf("appLatency = %+v, want p50 %v max %v", got, tc.p50, tc.max)
			}
		})
	}
}

// seedLink is directLink recording the seed of each start.
type seedLink struct {
	directLink
	seeds []int64
}

func (l *seedLink) Start(ctx context.Context, p, upstream string, seed int64) (string, io.Closer, error) {
	l.seeds = append(l.seeds, seed)
	return l.directLink.Start(ctx, p, upstream, seed)
}

// TestReconnectStudySeeds: each repeat seeds the link's loss anew, the
// same for every variant within it, so repeats do not lose the same
// datagrams (with one seed for all, every run dropped the same ones).
func TestReconnectStudySeeds(t *testing.T) {
	link := &seedLink{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	variants := []ReconnectVariant{{Name: "h3", Proto: ProtoH3}, {Name: "mqtt", Proto: ProtoMQTT}}
	if _, err := RunReconnectStudy(ctx, link, "lan", nil, variants, 1, 2, 16, time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 1, 2, 2}; !slices.Equal(link.seeds, want) {
		t.Fatalf("seeds %v, want %v", link.seeds, want)
	}
}
