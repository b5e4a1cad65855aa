package quicgov

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// readAll queues ps from addr (none: only what Conn released) and returns
// what ReadFrom hands over until the fake socket is empty.
func (h *harness) readAll(addr net.Addr, ps ...[]byte) [][]byte {
	h.t.Helper()
	h.fc.mu.Lock()
	for _, p := range ps {
		h.fc.reads = append(h.fc.reads, fakeRead{p, addr})
	}
	h.fc.mu.Unlock()
	var got [][]byte
	for {
		buf := make([]byte, 1500)
		n, _, err := h.c.ReadFrom(buf)
		if errors.Is(err, errNoRead) {
			return got
		}
		if err != nil {
			h.t.Fatal(err)
		}
		got = append(got, buf[:n])
	}
}

// client datagrams for the 0-RTT tests: an Initial and 0-RTT packets to
// connection ID dcid (seq tells 0-RTT datagrams apart).
func cliInitialTo(dcid []byte) []byte { return long(0xc0, version1, dcid, cidA, []byte{}, 1100) }
func cli0RTT(dcid []byte, seq, size int) []byte {
	p := long(0xd0, version1, dcid, cidA, nil, size)
	p[len(p)-1] = byte(seq)
	return p
}

func TestEarly(t *testing.T) {
	ms := time.Millisecond
	d1, d2 := []byte{0xd1, 1, 1, 1, 1, 1, 1, 1}, []byte{0xd2, 2, 2, 2, 2, 2, 2, 2}
	z1, z2, z3 := cli0RTT(d1, 1, 100), cli0RTT(d1, 2, 100), cli0RTT(d1, 3, 100)
	v2z := long(0xe0, version2, d2, cidA, nil, 100) // 0-RTT in QUIC v2
	v2i := long(0xd0, version2, d2, cidA, []byte{}, 1100)
	type step struct {
		at   time.Duration
		from net.Addr
		in   [][]byte // datagrams arriving (none: a read after what was released)
		out  [][]byte // what ReadFrom hands to quic-go
	}
	for _, tc := range []struct {
		name    string
		learned time.Duration // an answer time learned for peer1's IP first
		steps   []step
		want    Stats
	}{
		{name: "0-RTT before its Initial is handed over right after it", steps: []step{
			{0, peer1, [][]byte{z1, z2}, nil},
			{2000 * ms, peer1, [][]byte{cliInitialTo(d1), z3}, [][]byte{cliInitialTo(d1), z1, z2, z3}},
		}, want: Stats{ZeroRTTHeld: 2, ZeroRTTMatched: 2}},
		{name: "QUIC v2", steps: []step{
			{0, peer1, [][]byte{v2z}, nil},
			{100 * ms, peer1, [][]byte{v2i}, [][]byte{v2i, v2z}},
		}, want: Stats{ZeroRTTHeld: 1, ZeroRTTMatched: 1}},
		{name: "0-RTT after its Initial passes", steps: []step{
			{0, peer1, [][]byte{cat(cliInitialTo(d1), z1), z2}, [][]byte{cat(cliInitialTo(d1), z1), z2}},
		}},
		{name: "an Initial from another address or to another ID releases nothing", steps: []step{
			{0, peer1, [][]byte{z1}, nil},
			{10 * ms, peer2, [][]byte{cliInitialTo(d1)}, [][]byte{cliInitialTo(d1)}},
			{20 * ms, peer1, [][]byte{cliInitialTo(d2)}, [][]byte{cliInitialTo(d2)}},
			{30 * ms, peer1, [][]byte{cliInitialTo(d1)}, [][]byte{cliInitialTo(d1), z1}},
		}, want: Stats{ZeroRTTHeld: 1, ZeroRTTMatched: 1}},
		{name: "too old: handed over without the Initial at DefaultEarlyAge", steps: []step{
			{0, peer1, [][]byte{z1}, nil},
			{2999 * ms, peer1, nil, nil},
			{3000 * ms, peer1, nil, [][]byte{z1}},
			{3100 * ms, peer1, [][]byte{cliInitialTo(d1)}, [][]byte{cliInitialTo(d1)}},
		}, want: Stats{ZeroRTTHeld: 1, ZeroRTTExpired: 1}},
		{name: "too old: 2 x the answer time when longer", learned: 2 * time.Second, steps: []step{
			{0, peer1, [][]byte{z1}, nil},
			{3999 * ms, peer1, nil, nil},
			{4000 * ms, peer1, nil, [][]byte{z1}},
		}, want: Stats{ZeroRTTHeld: 1, ZeroRTTExpired: 1}},
		{name: "too many for one connection ID: the rest pass", steps: []step{
			{0, peer1, seq(d1, 9, 100), seq(d1, 9, 100)[8:]},
			{10 * ms, peer1, [][]byte{cliInitialTo(d1)}, append([][]byte{cliInitialTo(d1)}, seq(d1, 8, 100)...)},
		}, want: Stats{ZeroRTTHeld: 8, ZeroRTTMatched: 8}},
		{name: "too many bytes: the rest pass", steps: []step{
			{0, peer1, fullIDs(14, 1200), fullIDs(14, 1200)[maxEarlyBytes/1221:]},
		}, want: Stats{ZeroRTTHeld: maxEarlyBytes / 1221}},
		{name: "too many connection IDs: the rest pass", steps: []step{
			{0, peer1, manyIDs(65, 50), manyIDs(65, 50)[64:]},
		}, want: Stats{ZeroRTTHeld: 64}},
		{name: "malformed 0-RTT passes", steps: []step{
			{0, peer1, [][]byte{z1[:len(z1)-1]}, [][]byte{z1[:len(z1)-1]}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			if tc.learned > 0 {
				h.learn(peer1, cidA, tc.learned)
			}
			base := h.c.Stats()
			for i, s := range tc.steps {
				h.at(s.at)
				got := h.readAll(s.from, s.in...)
				if !equalDatagrams(got, s.out) {
					t.Fatalf("step %d: read %s, want %s", i, describe(got), describe(s.out))
				}
			}
			st := h.c.Stats()
			st.Samples -= base.Samples
			if st != tc.want {
				t.Fatalf("stats %+v, want %+v", st, tc.want)
			}
		})
	}
}

// TestEarlyEvicted: with the table full (MaxPeers), the least recently
// used connection ID's datagrams go to quic-go.
func TestEarlyEvicted(t *testing.T) {
	h := newHarness(t, Options{MaxPeers: 2})
	ids := manyIDs(3, 50)
	if got := h.readAll(peer1, ids[:2]...); len(got) != 0 {
		t.Fatalf("read %s, want nothing", describe(got))
	}
	got := h.readAll(peer1, ids[2])
	if !equalDatagrams(got, ids[:1]) {
		t.Fatalf("read %s, want the first", describe(got))
	}
	if st := h.c.Stats(); st.ZeroRTTHeld != 3 || st.ZeroRTTExpired != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := h.c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.c.earlyN.Load(); n != 0 {
		t.Fatalf("%d datagrams kept after Close", n)
	}
}

// seq returns n 0-RTT datagrams to dcid.
func seq(dcid []byte, n, size int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, cli0RTT(dcid, i, size))
	}
	return out
}

// manyIDs returns n 0-RTT datagrams, each to its own connection ID.
func manyIDs(n, size int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, cli0RTT([]byte{0xee, byte(i >> 8), byte(i), 0, 0, 0, 0, 0}, i, size))
	}
	return out
}

// fullIDs returns maxEarlyPerConn 0-RTT datagrams to each of n
// connection IDs.
func fullIDs(n, size int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, seq([]byte{0xef, byte(i >> 8), byte(i), 0, 0, 0, 0, 0}, maxEarlyPerConn, size)...)
	}
	return out
}

func equalDatagrams(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func describe(ds [][]byte) string {
	s := "["
	for _, d := range ds {
		s += fmt.Sprintf(" %06b/%d/%x", First(d), len(d), d[len(d)-1])
	}
	return s + " ]"
}
