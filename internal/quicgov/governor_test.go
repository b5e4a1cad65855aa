package quicgov

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeConn records writes and serves queued reads.
type fakeConn struct {
	net.PacketConn // nil: other methods are not used
	mu             sync.Mutex
	written        [][]byte
	reads          []fakeRead
}

// errNoRead is fakeConn's read error when no datagram is queued.
var errNoRead = errors.New("no datagram queued")

type fakeRead struct {
	p    []byte
	from net.Addr
}

func (f *fakeConn) WriteTo(p []byte, _ net.Addr) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written = append(f.written, append([]byte(nil), p...))
	return len(p), nil
}

func (f *fakeConn) ReadFrom(p []byte) (int, net.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reads) == 0 {
		return 0, nil, errNoRead
	}
	r := f.reads[0]
	f.reads = f.reads[1:]
	return copy(p, r.p), r.from, nil
}

func (f *fakeConn) Close() error { return nil }

func (f *fakeConn) nWritten() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.written)
}

// harness drives a Conn on a fake clock with timers fired by hand.
type harness struct {
	t      *testing.T
	fc     *fakeConn
	c      *Conn
	t0     time.Time
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func newHarness(t *testing.T, o Options) *harness {
	h := &harness{t: t, fc: &fakeConn{}, t0: time.Unix(1000, 0)}
	h.now = h.t0
	h.c = New(h.fc, o)
	h.c.now = func() time.Time { return h.now }
	h.c.afterFunc = func(d time.Duration, f func()) func() {
		ft := &fakeTimer{at: h.now.Add(d), f: f}
		h.timers = append(h.timers, ft)
		return func() { ft.stopped = true }
	}
	return h
}

// at sets the clock to t0 + d.
func (h *harness) at(d time.Duration) { h.now = h.t0.Add(d) }

// send writes p to addr and reports whether it reached the socket.
func (h *harness) send(p []byte, addr net.Addr) bool {
	h.t.Helper()
	before := h.fc.nWritten()
	if n, err := h.c.WriteTo(p, addr); err != nil || n != len(p) {
		h.t.Fatalf("WriteTo = %d, %v", n, err)
	}
	return h.fc.nWritten() > before
}

// recv delivers p from addr through ReadFrom.
func (h *harness) recv(p []byte, addr net.Addr) {
	h.t.Helper()
	h.fc.mu.Lock()
	h.fc.reads = append(h.fc.reads, fakeRead{p, addr})
	h.fc.mu.Unlock()
	buf := make([]byte, 1500)
	if _, _, err := h.c.ReadFrom(buf); err != nil {
		h.t.Fatal(err)
	}
}

// fire runs the timers due by now that were not stopped.
func (h *harness) fire() {
	for _, ft := range h.timers {
		if !ft.stopped && !ft.at.After(h.now) {
			ft.stopped = true
			ft.f()
		}
	}
}

var (
	peer1  = &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 4000}
	peer1b = &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 4001} // same IP, new socket
	peer2  = &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 4000}
)

// server packets to a client with connection ID dcid.
func srvInitial(dcid []byte) []byte {
	return cat(long(0xc0, version1, dcid, cidB, []byte{}, 1100), long(0xe0, version1, dcid, cidB, nil, 20))
}
func srvHandshake(dcid []byte) []byte { return long(0xe0, version1, dcid, cidB, nil, 400) }

// client packets.
var (
	cliInitial0RTT = cat(long(0xc0, version1, cidB, cidA, []byte{}, 1100), zeroRTT1)
	cliFinished    = cat(long(0xc0, version1, cidB, cidA, []byte{}, 20), long(0xe0, version1, cidB, cidA, nil, 60))
	cliShort       = short1
)

// learn runs a first connection from addr whose answer comes after d.
func (h *harness) learn(addr net.Addr, dcid []byte, d time.Duration) {
	h.t.Helper()
	h.recv(cliInitial0RTT, addr)
	if !h.send(srvInitial(dcid), addr) {
		h.t.Fatal("first flight held")
	}
	h.now = h.now.Add(d)
	h.recv(cliFinished, addr)
}

func TestGovernor(t *testing.T) {
	ms := time.Millisecond
	cid1, cid2 := []byte{0xa1, 0xa1, 0xa1, 0xa1}, []byte{0xb2, 0xb2, 0xb2, 0xb2}
	type step struct {
		at   time.Duration
		op   string // "send", "recv", "fire"
		p    []byte
		to   net.Addr
		pass bool // for "send": reached the socket
	}
	for _, tc := range []struct {
		name string
		// learned: a first connection from peer1 answered after 1 s
		// (hold 1.5 s) before the steps, which start at t0.
		learned bool
		steps   []step
		want    Stats // beyond the learning's sample
		wrote   int   // datagrams written by the steps
	}{
		{name: "unknown peer: probes pass", steps: []step{
			{0, "send", srvInitial(cid2), peer2, true},
			{200 * ms, "send", srvInitial(cid2), peer2, true},
			{400 * ms, "send", srvHandshake(cid2), peer2, true},
		}, wrote: 3},
		{name: "known IP: probes held, dropped on the client's Handshake", learned: true, steps: []step{
			{0, "recv", cliInitial0RTT, peer1b, false},
			{0, "send", srvInitial(cid2), peer1b, true},
			{5 * ms, "send", srvHandshake(cid2), peer1b, true}, // rest of the first flight
			{100 * ms, "send", cliShort, peer1b, true},         // 0.5-RTT response
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{400 * ms, "send", srvHandshake(cid2), peer1b, false},
			{1000 * ms, "recv", cliFinished, peer1b, false},
			{1600 * ms, "fire", nil, nil, false},
			{1700 * ms, "send", srvHandshake(cid2), peer1b, true}, // after progress: passes
		}, want: Stats{Held: 3, Dropped: 3, Samples: 1}, wrote: 4},
		{name: "no progress: held probes released when the hold ends", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{400 * ms, "send", srvHandshake(cid2), peer1b, false},
			{1499 * ms, "fire", nil, nil, false},
			{1500 * ms, "fire", nil, nil, false},
			{1600 * ms, "send", srvInitial(cid2), peer1b, true}, // after the hold
		}, want: Stats{Held: 2, Released: 2}, wrote: 4},
		{name: "the client's Initial probe after the answer time releases the held probes", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{400 * ms, "send", srvHandshake(cid2), peer1b, false},
			{1000 * ms, "recv", cliInitial0RTT, peer1b, false}, // both held go out
			{1100 * ms, "send", srvHandshake(cid2), peer1b, true},
			{1500 * ms, "fire", nil, nil, false},
		}, want: Stats{Held: 2, Released: 2, ReleasedOnProbe: 2}, wrote: 4},
		{name: "the client's Initial probe before anything is held: the handshake teaches nothing", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{1000 * ms, "recv", cliInitial0RTT, peer1b, false},  // lacks the first flight; nothing to release
			{1100 * ms, "send", srvInitial(cid2), peer1b, true}, // after the release: passes
			{1300 * ms, "recv", cliFinished, peer1b, false},     // progress, not learned
		}, want: Stats{Unlearned: 1}, wrote: 2},
		{name: "the client's Initial before the answer time releases nothing", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{999 * ms, "recv", cliInitial0RTT, peer1b, false},
			{1020 * ms, "send", srvHandshake(cid2), peer1b, false},
			{1500 * ms, "fire", nil, nil, false},
		}, want: Stats{Held: 2, Released: 2}, wrote: 3},
		{name: "the client's 0-RTT datagram after the answer time releases nothing", learned: true, steps: []step{
			{0, "recv", initial1, peer1b, false}, // its Initial: the 0-RTT datagram is not kept (early.go)
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{1000 * ms, "recv", zeroRTT1, peer1b, false},
			{1020 * ms, "send", srvHandshake(cid2), peer1b, false},
			{1500 * ms, "fire", nil, nil, false},
		}, want: Stats{Held: 2, Released: 2}, wrote: 3},
		{name: "at most maxHeld held, oldest dropped", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{400 * ms, "send", srvHandshake(cid2), peer1b, false},
			{400 * ms, "send", srvHandshake(cid2), peer1b, false},
			{1000 * ms, "send", srvInitial(cid2), peer1b, false},
			{1500 * ms, "fire", nil, nil, false},
		}, want: Stats{Held: 5, Dropped: 1, Released: 4}, wrote: 5},
		{name: "a reaction to the peer's datagram passes", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{300 * ms, "recv", cliInitial0RTT, peer1b, false}, // e.g. a client probe
			{305 * ms, "send", srvInitial(cid2), peer1b, true},
			{320 * ms, "send", srvInitial(cid2), peer1b, false},
		}, want: Stats{Held: 1}, wrote: 2},
		{name: "a new connection ID to the same address is a new handshake", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", srvInitial(cid2), peer1b, false},
			{300 * ms, "send", srvInitial(cid1), peer1b, true},
			{1500 * ms, "fire", nil, nil, false},
		}, want: Stats{Held: 1, Dropped: 1}, wrote: 2},
		{name: "a Retry starts no handshake", learned: true, steps: []step{
			{0, "send", append(long(0xf0, version1, cid2, cidB, nil, 0)[:5+1+4+1+8], make([]byte, 24)...), peer1b, true},
			{600 * ms, "send", srvInitial(cid2), peer1b, true}, // the first flight after the Retry
			{800 * ms, "send", srvInitial(cid2), peer1b, false},
		}, want: Stats{Held: 1}, wrote: 2},
		{name: "short headers always pass", learned: true, steps: []step{
			{0, "send", srvInitial(cid2), peer1b, true},
			{200 * ms, "send", cliShort, peer1b, true},
			{300 * ms, "send", []byte{}, peer1b, true},
		}, wrote: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			base := Stats{}
			if tc.learned {
				h.learn(peer1, cid1, time.Second)
				if got := h.c.AnswerTime(netip.MustParseAddr("10.0.0.1")); got != time.Second {
					t.Fatalf("answer time %v, want 1s", got)
				}
				base = h.c.Stats()
				h.t0 = h.now.Add(time.Second)
			}
			w0 := h.fc.nWritten()
			for i, s := range tc.steps {
				h.at(s.at)
				switch s.op {
				case "send":
					if got := h.send(s.p, s.to); got != s.pass {
						t.Fatalf("step %d (%v): passed %v, want %v", i, s.at, got, s.pass)
					}
				case "recv":
					h.recv(s.p, s.to)
				case "fire":
					h.fire()
				}
			}
			got := h.c.Stats()
			got.Samples -= base.Samples
			if got != tc.want {
				t.Errorf("stats %+v, want %+v", got, tc.want)
			}
			if n := h.fc.nWritten() - w0; n != tc.wrote {
				t.Errorf("%d datagrams written, want %d", n, tc.wrote)
			}
			h.c.mu.Lock()
			defer h.c.mu.Unlock()
			if h.c.heldBytes < 0 || (h.c.heldBytes > 0) != hasHeld(h.c) {
				t.Errorf("heldBytes %d inconsistent", h.c.heldBytes)
			}
		})
	}
}

func hasHeld(c *Conn) bool {
	for _, h := range c.hs.values() {
		if len(h.held) > 0 {
			return true
		}
	}
	return false
}

// TestAnswerTimeSmoothed: later samples move the answer time by a quarter.
func TestAnswerTimeSmoothed(t *testing.T) {
	h := newHarness(t, Options{})
	h.learn(peer1, []byte{1, 1, 1, 1}, time.Second)
	h.learn(peer1b, []byte{2, 2, 2, 2}, 2*time.Second)
	if got := h.c.AnswerTime(netip.MustParseAddr("10.0.0.1")); got != 1250*time.Millisecond {
		t.Fatalf("answer time %v, want 1.25s", got)
	}
}

// TestMaxPeers: the tables keep at most MaxPeers entries, evicting the
// least recently used; an evicted handshake's held probes are dropped.
func TestMaxPeers(t *testing.T) {
	h := newHarness(t, Options{MaxPeers: 1})
	h.learn(peer1, []byte{1, 1, 1, 1}, time.Second)
	h.learn(peer2, []byte{2, 2, 2, 2}, time.Second)
	if got := h.c.AnswerTime(netip.MustParseAddr("10.0.0.1")); got != 0 {
		t.Fatalf("evicted IP still has answer time %v", got)
	}
	// peer2 is known: its probe is held, then evicted by a new address.
	h.send(srvInitial([]byte{3, 3, 3, 3}), peer2)
	h.now = h.now.Add(200 * time.Millisecond)
	if h.send(srvInitial([]byte{3, 3, 3, 3}), peer2) {
		t.Fatal("probe passed")
	}
	h.send(srvInitial([]byte{4, 4, 4, 4}), peer1)
	h.c.mu.Lock()
	n, held := h.c.hs.len(), h.c.heldBytes
	h.c.mu.Unlock()
	if n != 1 || held != 0 {
		t.Fatalf("%d handshakes, %d bytes held; want 1, 0", n, held)
	}
	if s := h.c.Stats(); s.Dropped != 1 {
		t.Fatalf("stats %+v, want 1 dropped", s)
	}
}

// TestReleaseRace: a release and the client's Handshake racing under
// -race: whichever comes first wins, and nothing is both sent and counted
// dropped.
func TestReleaseRace(t *testing.T) {
	fc := &fakeConn{}
	c := New(fc, Options{})
	var (
		mu     sync.Mutex
		timerF func()
	)
	c.afterFunc = func(_ time.Duration, f func()) func() {
		mu.Lock()
		timerF = f
		mu.Unlock()
		return func() {}
	}
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	c.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	adv := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	_, _ = c.WriteTo(srvInitial([]byte{1, 1, 1, 1}), peer1)
	adv(time.Second)
	c.received(cliFinished, peer1)
	_, _ = c.WriteTo(srvInitial([]byte{2, 2, 2, 2}), peer1)
	adv(200 * time.Millisecond)
	_, _ = c.WriteTo(srvInitial([]byte{2, 2, 2, 2}), peer1)
	mu.Lock()
	f := timerF
	mu.Unlock()
	if f == nil {
		t.Fatal("nothing held")
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f() }()
	go func() { defer wg.Done(); c.received(cliFinished, peer1) }()
	wg.Wait()
	s := c.Stats()
	if s.Held != 1 || s.Released+s.Dropped != 1 {
		t.Fatalf("stats %+v: want 1 held, then released or dropped", s)
	}
}

// TestWrap: off returns the socket itself; on a *net.UDPConn the governor
// exposes the file descriptor (quic-go sets DF and buffer sizes through it).
func TestWrap(t *testing.T) {
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if Wrap(u, false, nil) != net.PacketConn(u) {
		t.Fatal("off: not the socket itself")
	}
	w := Wrap(u, true, nil)
	if _, ok := w.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); !ok {
		t.Fatal("on a UDP socket: no SyscallConn")
	}
	if _, ok := Wrap(&fakeConn{}, true, nil).(syscall.Conn); ok {
		t.Fatal("on a socket without a descriptor: SyscallConn")
	}
}

// TestReleaseOrder: released datagrams without an Initial packet go
// before the Initial ones, whichever ends the hold (the timer, the
// client's Initial probe).
func TestReleaseOrder(t *testing.T) {
	ms := time.Millisecond
	cid := []byte{0xb2, 0xb2, 0xb2, 0xb2}
	for _, tc := range []struct {
		name string
		end  func(h *harness)
	}{
		{"the hold ends", func(h *harness) { h.at(1500 * ms); h.fire() }},
		{"the client's Initial probe", func(h *harness) { h.at(1000 * ms); h.recv(cliInitial0RTT, peer1b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			h.learn(peer1, []byte{0xa1, 0xa1, 0xa1, 0xa1}, time.Second)
			h.t0 = h.now.Add(time.Second)
			h.at(0)
			h.send(srvInitial(cid), peer1b)
			h.at(200 * ms)
			h.send(srvInitial(cid), peer1b)
			h.at(400 * ms)
			h.send(srvHandshake(cid), peer1b)
			w0 := h.fc.nWritten()
			tc.end(h)
			h.fc.mu.Lock()
			got := h.fc.written[w0:]
			h.fc.mu.Unlock()
			if len(got) != 2 || string(got[0]) != string(srvHandshake(cid)) || string(got[1]) != string(srvInitial(cid)) {
				t.Fatalf("released %d datagrams; want the Handshake one, then the Initial one", len(got))
			}
		})
	}
}
