package main

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/quiot/quiot/internal/netimpair"
)

// The TCP link: a userspace relay between the edge and the upstream that
// shapes each direction of the byte stream with a link profile's delay,
// jitter and rate (internal/netimpair's Link model, 40 B of IPv4+TCP
// header per segment for the rate), shared by all connections like one
// radio link. A byte stream cannot lose bytes: a segment the model drops
// (random or burst loss) is sent again after a retransmission timeout
// (the base RTT + 200 ms, doubling while it is lost again), and everything
// behind it waits (head-of-line blocking), as TCP does. TCP's congestion
// control is taken as ideal: the link's queue has no limit (no queue
// drops), a burst waits for the rate.
//
// The outage has two modes:
//
//   - hold (a silent blackout, as when a radio link goes away): the relay
//     keeps every connection open and forwards nothing; what the ends send
//     is held and leaves when TCP's retransmission would get through: the
//     first retransmission (RTO doubling from the base RTT + 200 ms, from
//     the first byte held) after the link's return. A connection accepted
//     during the blackout reaches the upstream when its SYN, sent again
//     after 1, 2, 4... s, would;
//   - close: the relay closes its connections and refuses new ones while
//     cut (the upstream is gone, every end sees a reset).

// tcpMSS is the segment size the relay cuts chunks into for the model.
const tcpMSS = 1448

// tcpHeader is the IPv4 + TCP header per segment (without options).
const tcpHeader = 40

// tcpMinRTO is Linux's TCP_RTO_MIN.
const tcpMinRTO = 200 * time.Millisecond

// tcpMaxRTO is Linux's TCP_RTO_MAX.
const tcpMaxRTO = 120 * time.Second

// shaper is one direction of the emulated link, shared by all connections.
type shaper struct {
	mu   sync.Mutex
	link *netimpair.Link
	rto  time.Duration
}

// admit passes n payload bytes through the model at the current time and
// returns when the last of their segments leaves the link. n == 0 is a
// segment without payload (a FIN).
func (s *shaper) admit(n int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var dep time.Time
	for first := true; first || n > 0; first = false {
		seg := min(n, tcpMSS)
		n -= seg
		t, rto := now, s.rto
		for {
			at, cause := s.link.Admit(t, seg)
			if cause == netimpair.Kept {
				if at.After(dep) {
					dep = at
				}
				break
			}
			// Lost: sent again after the retransmission timeout.
			t = t.Add(rto)
			rto = min(2*rto, tcpMaxRTO)
		}
	}
	return dep
}

// tcpLink relays TCP connections to the upstream through the shapers and
// counts the bytes and segments crossing.
type tcpLink struct {
	l        net.Listener
	target   string
	hold     bool // outage mode: hold (silent) or close
	rtt      time.Duration
	upS      *shaper
	downS    *shaper
	up, down atomic.Uint64 // payload bytes delivered each way

	mu       sync.Mutex
	cut_     bool
	backAt   time.Time     // the last return of the link
	back     chan struct{} // closed when the link returns
	pairs    map[*tcpPair]struct{}
	segsUp   uint64 // segments of closed connections (edge leg)
	segsDown uint64
}

// tcpPair is one relayed connection.
type tcpPair struct {
	t        *tcpLink
	c        net.Conn // the edge's connection to the relay
	u        net.Conn // the relay's to the upstream (nil until dialled)
	once     sync.Once
	accepted time.Time
	closed   bool          // under t.mu
	cut      bool          // accepted during a blackout
	back     chan struct{} // closed at the end of that blackout
}

func newTCPLink(port int, up, down netimpair.Direction, rtt time.Duration, hold bool, seed uint64) (*tcpLink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcp link: %w", err)
	}
	up.Overhead, down.Overhead = tcpHeader, tcpHeader
	// TCP's congestion control keeps its queue from overflowing (taken as
	// ideal: the link's queue has no limit here).
	up.QueueLimit, down.QueueLimit = 1<<30, 1<<30
	rto := rtt + tcpMinRTO
	t := &tcpLink{
		l: l, target: fmt.Sprintf("127.0.0.1:%d", port), hold: hold, rtt: rtt,
		upS:   &shaper{link: netimpair.NewLink(up, seed), rto: rto},
		downS: &shaper{link: netimpair.NewLink(down, seed+1), rto: rto},
		back:  make(chan struct{}),
		pairs: map[*tcpPair]struct{}{},
	}
	close(t.back)
	go t.accept()
	return t, nil
}

func (t *tcpLink) accept() {
	for {
		c, err := t.l.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		if t.cut_ && !t.hold {
			t.mu.Unlock()
			_ = c.Close()
			continue
		}
		p := &tcpPair{t: t, c: c, accepted: time.Now(), cut: t.cut_, back: t.back}
		t.pairs[p] = struct{}{}
		t.mu.Unlock()
		go p.run()
	}
}

// release waits until data held since since, during the blackout that
// back closes at the end of, may cross: at the first retransmission (RTO
// doubling from rto) after the link's return.
func (t *tcpLink) release(since time.Time, rto time.Duration, back chan struct{}) {
	<-back
	t.mu.Lock()
	backAt := t.backAt
	t.mu.Unlock()
	at := since.Add(rto)
	for at.Before(backAt) {
		rto = min(2*rto, tcpMaxRTO)
		at = at.Add(rto)
	}
	time.Sleep(time.Until(at))
}

// state says whether the link is cut now and returns the channel closed
// at its return.
func (t *tcpLink) state() (bool, chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cut_, t.back
}

func (p *tcpPair) run() {
	t := p.t
	// The SYN: one RTT before the first byte goes (the handshake), or, in a
	// blackout, when a SYN sent again gets through.
	if p.cut && t.hold {
		t.release(p.accepted, time.Second, p.back)
	}
	time.Sleep(t.rtt)
	u, err := net.Dial("tcp", t.target)
	if err != nil {
		p.close()
		return
	}
	t.mu.Lock()
	if p.closed {
		t.mu.Unlock()
		_ = u.Close()
		return
	}
	p.u = u
	t.mu.Unlock()
	go p.pipe(p.u, p.c, t.downS, &t.down)
	p.pipe(p.c, p.u, t.upS, &t.up)
}

type chunk struct {
	b   []byte // nil: end of stream
	dep time.Time
}

// pipe relays src to dst through s: a reader queues what arrives, a
// scheduler gives each chunk its departure through the model (holding it
// in a blackout), a writer sends it then.
func (p *tcpPair) pipe(src, dst net.Conn, s *shaper, n *atomic.Uint64) {
	type arrival struct {
		b    []byte
		at   time.Time
		held bool          // arrived during a blackout
		back chan struct{} // closed at its end
	}
	in := make(chan arrival, 4096)
	out := make(chan chunk, 4096)
	go func() {
		defer close(in)
		for {
			buf := make([]byte, 32<<10)
			k, err := src.Read(buf)
			held, back := p.t.state()
			if k > 0 {
				in <- arrival{b: buf[:k], at: time.Now(), held: held, back: back}
			}
			if err != nil {
				in <- arrival{at: time.Now(), held: held, back: back}
				return
			}
		}
	}()
	go func() {
		defer close(out)
		var released chan struct{} // the blackout whose held data went
		var last time.Time
		for a := range in {
			if a.held && p.t.hold && a.back != released {
				// The first byte held in this blackout: it (and all
				// behind it) goes with TCP's first retransmission after
				// the return.
				p.t.release(a.at, s.rto, a.back)
				released = a.back
			}
			dep := s.admit(len(a.b))
			if dep.Before(last) {
				dep = last
			}
			last = dep
			out <- chunk{b: a.b, dep: dep}
		}
	}()
	for c := range out {
		time.Sleep(time.Until(c.dep))
		if c.b == nil {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
		n.Add(uint64(len(c.b)))
	}
	p.close()
	for range out { // let the scheduler finish
	}
}

// segs returns the segments the edge's connection received (up) and sent
// (down), from TCP_INFO.
func segs(c net.Conn) (up, down uint64) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, 0
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, 0
	}
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			up, down = uint64(info.Segs_in), uint64(info.Segs_out)
		}
	})
	return up, down
}

func (p *tcpPair) close() {
	p.once.Do(func() {
		su, sd := segs(p.c)
		p.t.mu.Lock()
		p.t.segsUp += su
		p.t.segsDown += sd
		delete(p.t.pairs, p)
		p.closed = true
		u := p.u
		p.t.mu.Unlock()
		_ = p.c.Close()
		if u != nil {
			_ = u.Close()
		}
	})
}

func (t *tcpLink) addr() string { return t.l.Addr().String() }

func (t *tcpLink) cut(on bool) {
	t.mu.Lock()
	if on == t.cut_ {
		t.mu.Unlock()
		return
	}
	t.cut_ = on
	if on {
		t.back = make(chan struct{})
	} else {
		t.backAt = time.Now()
		close(t.back)
	}
	var pairs []*tcpPair
	if on && !t.hold {
		for p := range t.pairs {
			pairs = append(pairs, p)
		}
	}
	t.mu.Unlock()
	for _, p := range pairs {
		p.close()
	}
}

// count counts what crossed each way: the payload delivered plus 40 B per
// segment on the edge's leg (TCP_INFO's segs_in and segs_out of the
// relay's sockets, open and closed).
func (t *tcpLink) count() counts {
	t.mu.Lock()
	su, sd := t.segsUp, t.segsDown
	for p := range t.pairs {
		a, b := segs(p.c)
		su += a
		sd += b
	}
	t.mu.Unlock()
	return counts{t.up.Load() + tcpHeader*su, t.down.Load() + tcpHeader*sd, su, sd}
}

func (t *tcpLink) close() {
	_ = t.l.Close()
	t.mu.Lock()
	var pairs []*tcpPair
	for p := range t.pairs {
		pairs = append(pairs, p)
	}
	t.mu.Unlock()
	for _, p := range pairs {
		p.close()
	}
}
