package probehold

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// logConn records every datagram written and returns the datagram next
// on ReadFrom.
type logConn struct {
	net.PacketConn
	mu      sync.Mutex
	written [][]byte
	next    []byte
}

func (c *logConn) WriteTo(p []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written = append(c.written, bytes.Clone(p))
	return len(p), nil
}

func (c *logConn) ReadFrom(p []byte) (int, net.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return copy(p, c.next), nil, nil
}

func (c *logConn) Close() error { return nil }

func (c *logConn) log() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.written...)
}

// longPacket is a QUIC v1 long-header datagram: first byte b, the
// connection IDs, then body.
func longPacket(b byte, dcid, scid []byte, body string) []byte {
	p := []byte{b, 0, 0, 0, 1, byte(len(dcid))}
	p = append(p, dcid...)
	p = append(p, byte(len(scid)))
	p = append(p, scid...)
	return append(p, body...)
}

// TestFirstFlightCopies: the datagrams of a new connection's first flight
// (its Initial and what follows within flightGap with the same connection
// ID) go once more when the flight gap has passed, in order, unless the
// peer answered first; later flights, Initials to the peer's connection ID
// and the same connection's probes are not copied.
func TestFirstFlightCopies(t *testing.T) {
	ms := time.Millisecond
	cidA, cidB, cidS := []byte{0xa, 0xa, 0xa, 0xa}, []byte{0xb, 0xb, 0xb, 0xb}, []byte{0x5, 0x5, 0x5, 0x5}
	initA := longPacket(0xc0, cidA, nil, "initial A") // the client's first Initial, to a new ID
	zeroA := longPacket(0xd0, cidA, nil, "0-RTT A")
	initB := longPacket(0xc0, cidB, nil, "initial B")
	initS := longPacket(0xc0, cidS, nil, "initial to the server's ID")
	hsS := longPacket(0xe0, cidS, nil, "handshake")
	fromServer := longPacket(0xc0, cidA, cidS, "the server's Initial") // source ID cidS
	cidC, cidN := []byte{0xc, 0xc, 0xc, 0xc}, []byte{0xe, 0xe, 0xe, 0xe}
	initAC := longPacket(0xc0, cidA, cidC, "initial A from C") // a client with connection ID cidC
	zeroAC := longPacket(0xd0, cidA, cidC, "0-RTT A from C")
	ackNC := longPacket(0xc0, cidN, cidC, "ack of the server's Initial") // to an ID the server issued
	v2Init := longPacket(0xd0, cidB, nil, "QUIC v2 Initial")
	copy(v2Init[1:5], []byte{0x6b, 0x33, 0x43, 0xcf})
	type step struct {
		at time.Duration
		op string // "send", "recv", "fire"
		p  []byte
	}
	for _, tc := range []struct {
		name   string
		off    bool
		steps  []step
		copies [][]byte // written again by the timers, in order
	}{
		{name: "unanswered: the flight goes again after the gap", steps: []step{
			{0, "send", initA},
			{5 * ms, "send", zeroA},
			{19 * ms, "fire", nil},
			{20 * ms, "fire", nil},
		}, copies: [][]byte{initA, zeroA}},
		{name: "datagrams after the gap are not copied", steps: []step{
			{0, "send", initA},
			{20 * ms, "fire", nil},
			{25 * ms, "send", zeroA}, // held (0-RTT after the flight)
			{200 * ms, "send", initA},
		}, copies: [][]byte{initA}},
		{name: "an answer within the gap: no copies", steps: []step{
			{0, "send", initA},
			{10 * ms, "recv", fromServer},
			{20 * ms, "fire", nil},
		}},
		{name: "off: no copies", off: true, steps: []step{
			{0, "send", initA},
			{5 * ms, "send", zeroA},
			{20 * ms, "fire", nil},
		}},
		{name: "a probe of the same connection after the hold is no first flight", steps: []step{
			{0, "send", initA},
			{20 * ms, "fire", nil},
			{3000 * ms, "send", initA},
			{3020 * ms, "fire", nil},
		}, copies: [][]byte{initA}},
		{name: "Initials to the peer's connection ID are no first flight", steps: []step{
			{0, "send", initA},
			{500 * ms, "recv", fromServer},
			{500 * ms, "fire", nil},
			{510 * ms, "send", initS},
			{515 * ms, "send", hsS},
			{530 * ms, "fire", nil},
		}},
		{name: "a new connection on the socket is copied too", steps: []step{
			{0, "send", initA},
			{500 * ms, "recv", fromServer},
			{4000 * ms, "send", initB},
			{4020 * ms, "fire", nil},
		}, copies: [][]byte{initB}},
		{name: "a new connection's flight replaces the copies of the last", steps: []step{
			{0, "send", initA},
			{3000 * ms, "send", initB}, // after the hold: a new flight
			{3020 * ms, "fire", nil},
		}, copies: [][]byte{initB}},
		{name: "a client's later Initials to new IDs of the server's are no first flight", steps: []step{
			{0, "send", initAC},
			{5 * ms, "send", zeroAC},
			{20 * ms, "fire", nil},
			{1500 * ms, "recv", fromServer},
			{1500 * ms, "send", ackNC},
			{1520 * ms, "fire", nil},
		}, copies: [][]byte{initAC, zeroAC}},
		{name: "QUIC v2", steps: []step{
			{0, "send", v2Init},
			{20 * ms, "fire", nil},
		}, copies: [][]byte{v2Init}},
		{name: "a 0-RTT datagram opening a flight is no first flight", steps: []step{
			{0, "send", zeroA},
			{20 * ms, "fire", nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			now := start
			ft := &fakeTimers{now: &now}
			lc := &logConn{}
			g := NewWithOptions(lc, 2*time.Second, Options{FirstFlightCopies: !tc.off})
			g.now = func() time.Time { return now }
			g.afterFunc = ft.afterFunc
			var copies [][]byte
			for i, s := range tc.steps {
				now = start.Add(s.at)
				switch s.op {
				case "send":
					if n, err := g.WriteTo(s.p, nil); err != nil || n != len(s.p) {
						t.Fatalf("step %d: WriteTo = %d, %v", i, n, err)
					}
				case "recv":
					lc.mu.Lock()
					lc.next = s.p
					lc.mu.Unlock()
					if _, _, err := g.ReadFrom(make([]byte, 100)); err != nil {
						t.Fatal(err)
					}
				case "fire":
					before := len(lc.log())
					ft.fire()
					copies = append(copies, lc.log()[before:]...)
				}
			}
			if len(copies) != len(tc.copies) {
				t.Fatalf("%d copies sent (%q), want %d (%q)", len(copies), copies, len(tc.copies), tc.copies)
			}
			for i := range copies {
				if !bytes.Equal(copies[i], tc.copies[i]) {
					t.Errorf("copy %d is %q, want %q", i, copies[i], tc.copies[i])
				}
			}
			if g.Copied() != len(tc.copies) {
				t.Errorf("Copied() = %d, want %d", g.Copied(), len(tc.copies))
			}
		})
	}
}
