package quicgov

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// TestFirstFlightCopies: for a peer IP with an answer time (1 s here),
// the server's long-header datagrams within flightGap of a new
// handshake's first go once more a quarter of the answer time later, in
// order, unless the client's Handshake or 1-RTT packet came first;
// nothing is copied for a peer without an answer time, nor with the
// option off, nor after the gap; and what the server sends an address,
// copies included, stays within three times what it received from it
// (sizes: the client's Initial 1163 B, the server's 1163 B, srvHS2 321
// B, a short header 31 B).
func TestFirstFlightCopies(t *testing.T) {
	ms := time.Millisecond
	cid1, cid2 := []byte{0xa1, 0xa1, 0xa1, 0xa1}, []byte{0xb2, 0xb2, 0xb2, 0xb2}
	srvHS2 := long(0xe0, version1, cid2, cidB, nil, 300)
	smallInitial := long(0xc0, version1, cidB, cidA, []byte{}, 200)
	bigShort := append([]byte{0x40}, make([]byte, 1199)...)
	type step struct {
		at time.Duration
		op string // "send", "recv", "fire"
		p  []byte
		to net.Addr
	}
	for _, tc := range []struct {
		name    string
		off     bool
		learned bool
		full    bool // the copies of other handshakes hold all but 100 bytes of maxHeldBytes
		steps   []step
		copies  [][]byte
		want    Stats // beyond the learning's sample
	}{
		{name: "known IP: the first flight and the answers before the copies go again, answers first", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{5 * ms, "send", srvHS2, peer1b},
			{10 * ms, "send", cliShort, peer1b}, // 0.5-RTT data
			{30 * ms, "send", cliShort, peer1b}, // the answer to 0-RTT data
			{249 * ms, "fire", nil, nil},
			{250 * ms, "fire", nil, nil},
			{260 * ms, "send", cliShort, peer1b}, // after the copies: not copied
		}, copies: [][]byte{cliShort, cliShort, srvInitial(cid2), srvHS2}, want: Stats{Copied: 4}},
		{name: "at most maxShortCopies short-header datagrams copied", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{10 * ms, "send", cliShort, peer1b},
			{11 * ms, "send", cliShort, peer1b},
			{12 * ms, "send", cliShort, peer1b},
			{250 * ms, "fire", nil, nil},
		}, copies: [][]byte{cliShort, cliShort, srvInitial(cid2)}, want: Stats{Copied: 3}},
		{name: "no short-header copies once the client's Handshake came", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{100 * ms, "recv", cliFinished, peer1b},
			{110 * ms, "send", cliShort, peer1b},
			{250 * ms, "fire", nil, nil},
		}, want: Stats{Samples: 1}},
		{name: "probes after the gap are held, not copied", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{200 * ms, "send", srvInitial(cid2), peer1b},
			{250 * ms, "fire", nil, nil},
			{1000 * ms, "recv", cliFinished, peer1b},
		}, copies: [][]byte{srvInitial(cid2)}, want: Stats{Copied: 1, Held: 1, Dropped: 1, Samples: 1}},
		{name: "the client's Handshake before the copies' time: no copies", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b},
			{150 * ms, "recv", cliFinished, peer1b},
			{250 * ms, "fire", nil, nil},
		}, want: Stats{Samples: 1}},
		{name: "the client's Initial before the copies' time: copies still go", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b},
			{150 * ms, "recv", cliInitial0RTT, peer1b},
			{250 * ms, "fire", nil, nil},
		}, copies: [][]byte{srvInitial(cid2)}, want: Stats{Copied: 1}},
		{name: "at most maxHeld datagrams copied", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{1 * ms, "send", srvHS2, peer1b},
			{2 * ms, "send", srvHS2, peer1b},
			{3 * ms, "send", srvHS2, peer1b},
			{4 * ms, "send", srvHS2, peer1b}, // the fifth: not copied
			{250 * ms, "fire", nil, nil},
		}, copies: [][]byte{srvInitial(cid2), srvHS2, srvHS2, srvHS2}, want: Stats{Copied: 4}},
		{name: "a client that sent little: no copy beyond three times it", learned: true, steps: []step{
			{0, "recv", smallInitial, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{250 * ms, "fire", nil, nil},
		}, want: Stats{CopiesOverBudget: 1}},
		{name: "nothing received from the address: no copies", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b},
			{250 * ms, "fire", nil, nil},
		}, want: Stats{CopiesOverBudget: 1}},
		{name: "copies stop at the budget", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b}, // budget 3489
			{0, "send", srvInitial(cid2), peer1b},
			{1 * ms, "send", srvHS2, peer1b},
			{2 * ms, "send", srvHS2, peer1b},
			{3 * ms, "send", srvHS2, peer1b}, // sent 2126: 1363 left
			{250 * ms, "fire", nil, nil},
		}, copies: [][]byte{srvInitial(cid2)}, want: Stats{Copied: 1, CopiesOverBudget: 3}},
		{name: "short-header datagrams count against the budget", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{10 * ms, "send", bigShort, peer1b}, // sent 2363: 1126 left
			{250 * ms, "fire", nil, nil},
		}, want: Stats{CopiesOverBudget: 2}},
		{name: "unknown IP: no copies", steps: []step{
			{0, "send", srvInitial(cid2), peer2},
			{250 * ms, "fire", nil, nil},
		}},
		{name: "off: no copies", off: true, learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b},
			{250 * ms, "fire", nil, nil},
		}},
		{name: "a new handshake to the address drops the last one's copies", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{10 * ms, "send", srvInitial(cid1), peer1b},
			{250 * ms, "fire", nil, nil},
			{260 * ms, "fire", nil, nil},
		}, copies: [][]byte{srvInitial(cid1)}, want: Stats{Copied: 1}},
		{name: "the copies of all handshakes at their bound: nothing kept", learned: true, full: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b},
			{0, "send", srvInitial(cid2), peer1b},
			{250 * ms, "fire", nil, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{FirstFlightCopies: !tc.off})
			if tc.learned {
				h.learn(peer1, cid1, time.Second)
				h.t0 = h.now.Add(time.Second)
			}
			base := h.c.Stats()
			preset := 0
			if tc.full {
				preset = maxHeldBytes - 100
				h.c.mu.Lock()
				h.c.copyBytes = preset
				h.c.mu.Unlock()
			}
			var copies [][]byte
			for i, s := range tc.steps {
				h.at(s.at)
				switch s.op {
				case "send":
					if !h.send(s.p, s.to) && i == 0 {
						t.Fatal("first flight held")
					}
				case "recv":
					h.recv(s.p, s.to)
				case "fire":
					before := h.fc.nWritten()
					h.fire()
					h.fc.mu.Lock()
					copies = append(copies, h.fc.written[before:]...)
					h.fc.mu.Unlock()
				}
			}
			h.c.mu.Lock()
			kept := h.c.copyBytes
			h.c.mu.Unlock()
			if kept != preset {
				t.Errorf("%d bytes still counted as kept for copies, want %d", kept-preset, 0)
			}
			got := h.c.Stats()
			got.Samples -= base.Samples
			if got != tc.want {
				t.Errorf("stats %+v, want %+v", got, tc.want)
			}
			if len(copies) != len(tc.copies) {
				t.Fatalf("%d copies sent, want %d", len(copies), len(tc.copies))
			}
			for i := range copies {
				if !bytes.Equal(copies[i], tc.copies[i]) {
					t.Errorf("copy %d differs: %x, want %x", i, copies[i], tc.copies[i])
				}
			}
		})
	}
}
