// Package netimpair is a userspace UDP link emulator: a relay between
// clients and one upstream server that applies one-way delay, jitter,
// random and Gilbert-Elliott burst loss, a rate limit and a drop-tail
// queue, separately per direction. It needs no root and no netem, and is
// seeded: the same seed and the same packet sequence give the same drops
// and delays.
//
// Clients send to Relay.Addr() instead of the server. Each client address
// gets its own upstream socket (a session), so the server sees one
// address per client, as through a NAT. Both directions are each one
// shared link (like a netem qdisc on an interface): all sessions share the
// rate and the queue of a direction.
package netimpair

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxDatagram is the largest UDP payload the relay forwards.
const maxDatagram = 65535

// Options configures a Relay. Upstream is required.
type Options struct {
	// Upstream is the server's UDP address ("host:port"). Required.
	Upstream string
	// Listen is the relay's own address. Default "127.0.0.1:0".
	Listen string
	// Up is the impairment from clients to the upstream server; Down the
	// one from the server back to the clients. Default: none.
	Up, Down Direction
	// Seed seeds the random numbers (Up uses Seed, Down Seed+1). Default 1.
	Seed uint64
	// SessionIdle closes a client's session after this long without
	// traffic in either direction. Default 5 minutes.
	SessionIdle time.Duration
	// SpinWindow is how long before a departure the sender stops sleeping
	// on a timer and yields in a loop instead, for sub-millisecond delay
	// accuracy (Go timers can fire late by up to a millisecond). Costs up
	// to that much CPU per wake-up. Default 250µs; negative disables.
	SpinWindow time.Duration
	// MaxInFlight bounds the datagrams held in the delay line of each
	// direction; beyond it datagrams are dropped (cause queue). Default
	// 100000.
	MaxInFlight int
	// Logger receives debug messages. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with defaults applied.
func (o Options) withDefaults() Options {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.SessionIdle == 0 {
		o.SessionIdle = 5 * time.Minute
	}
	if o.SpinWindow == 0 {
		o.SpinWindow = 250 * time.Microsecond
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 100000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// DirStats counts one direction's datagrams.
type DirStats struct {
	// Received is the number of datagrams that entered the link.
	Received uint64 `json:"received"`
	// Forwarded is the number delivered to their destination, and
	// ForwardedBytes their payload bytes.
	Forwarded      uint64 `json:"forwarded"`
	ForwardedBytes uint64 `json:"forwarded_bytes"`
	// DroppedRandom, DroppedBurst and DroppedQueue are drops by cause;
	// SendErrors counts datagrams the relay failed to send.
	DroppedRandom uint64 `json:"dropped_random"`
	DroppedBurst  uint64 `json:"dropped_burst"`
	DroppedQueue  uint64 `json:"dropped_queue"`
	// DroppedBlackout counts datagrams dropped while the link was cut
	// (Relay.SetBlackout).
	DroppedBlackout uint64 `json:"dropped_blackout"`
	SendErrors      uint64 `json:"send_errors"`
}

// Dropped returns all drops by the emulated link (not send errors).
func (s DirStats) Dropped() uint64 {
	return s.DroppedRandom + s.DroppedBurst + s.DroppedQueue + s.DroppedBlackout
}

// Stats are the relay's counters.
type Stats struct {
	// Up is client -> server, Down server -> client.
	Up   DirStats `json:"up"`
	Down DirStats `json:"down"`
	// Sessions is the number of client sessions open now.
	Sessions int `json:"sessions"`
}

// dirCounters are a direction's counters (atomic: safe on 32-bit ARM).
type dirCounters struct {
	received, forwarded, forwardedBytes, dropRandom, dropBurst, dropQueue, dropBlackout, sendErr atomic.Uint64
}

func (c *dirCounters) snapshot() DirStats {
	return DirStats{
		Received:        c.received.Load(),
		Forwarded:       c.forwarded.Load(),
		ForwardedBytes:  c.forwardedBytes.Load(),
		DroppedRandom:   c.dropRandom.Load(),
		DroppedBurst:    c.dropBurst.Load(),
		DroppedQueue:    c.dropQueue.Load(),
		DroppedBlackout: c.dropBlackout.Load(),
		SendErrors:      c.sendErr.Load(),
	}
}

// Relay is a running link emulator. Create it with New; stop it with Close.
type Relay struct {
	opts     Options
	log      *slog.Logger
	ln       *net.UDPConn
	upstream *net.UDPAddr

	up, down *pipe
	blackout atomic.Bool

	mu       sync.Mutex
	sessions map[netip.AddrPort]*session
	closed   bool

	done chan struct{}
	wg   sync.WaitGroup
}

// session is one client's upstream socket.
type session struct {
	client   netip.AddrPort
	conn     *net.UDPConn // connected to the upstream
	lastSeen atomic.Int64 // unix nanoseconds
}

// New starts a relay listening on opts.Listen and forwarding to
// opts.Upstream.
func New(opts Options) (*Relay, error) {
	o := opts.withDefaults()
	if o.Upstream == "" {
		return nil, errors.New("netimpair: no upstream address")
	}
	if err := o.Up.Validate(); err != nil {
		return nil, fmt.Errorf("netimpair: up: %w", err)
	}
	if err := o.Down.Validate(); err != nil {
		return nil, fmt.Errorf("netimpair: down: %w", err)
	}
	if o.SessionIdle < 0 || o.MaxInFlight < 0 {
		return nil, errors.New("netimpair: negative session idle time or in-flight limit")
	}
	upAddr, err := net.ResolveUDPAddr("udp", o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("netimpair: resolve upstream %q: %w", o.Upstream, err)
	}
	laddr, err := net.ResolveUDPAddr("udp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("netimpair: resolve listen address %q: %w", o.Listen, err)
	}
	ln, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("netimpair: listen: %w", err)
	}
	setBuffers(ln)
	r := &Relay{
		opts:     o,
		log:      o.Logger,
		ln:       ln,
		upstream: upAddr,
		sessions: map[netip.AddrPort]*session{},
		done:     make(chan struct{}),
	}
	r.up = newPipe(NewLink(o.Up, o.Seed), o, r.sendUp)
	r.down = newPipe(NewLink(o.Down, o.Seed+1), o, r.sendDown)
	r.wg.Add(4)
	go func() { defer r.wg.Done(); r.up.run(r.done) }()
	go func() { defer r.wg.Done(); r.down.run(r.done) }()
	go func() { defer r.wg.Done(); r.readClients() }()
	go func() { defer r.wg.Done(); r.reapSessions() }()
	return r, nil
}

// setBuffers asks for large socket buffers so bursts queue in the model,
// not in the kernel (best effort).
func setBuffers(c *net.UDPConn) {
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetWriteBuffer(4 << 20)
}

// Addr returns the address clients send to.
func (r *Relay) Addr() *net.UDPAddr { return r.ln.LocalAddr().(*net.UDPAddr) }

// SetBlackout cuts the link in both directions (on) or restores it
// (off): while cut, every datagram arriving from either side is dropped
// and counted as DroppedBlackout, as when a radio link drops out.
// Datagrams already in the delay line still leave.
func (r *Relay) SetBlackout(on bool) {
	r.blackout.Store(on)
	r.log.Debug("blackout", "on", on)
}

// Stats returns the counters so far.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	n := len(r.sessions)
	r.mu.Unlock()
	return Stats{Up: r.up.c.snapshot(), Down: r.down.c.snapshot(), Sessions: n}
}

// Close stops the relay, closes every socket and waits for its goroutines.
// Datagrams still in the delay line are discarded.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	err := r.ln.Close()
	for _, s := range r.sessions {
		s.conn.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

// readClients reads datagrams from clients and feeds the up link.
func (r *Relay) readClients() {
	rb := make([]byte, maxDatagram)
	for {
		n, from, err := r.ln.ReadFromUDPAddrPort(rb)
		if err != nil {
			if r.isClosed() {
				return
			}
			r.log.Debug("read from client", "err", err)
			continue
		}
		s, err := r.session(from)
		if err != nil {
			r.log.Debug("open session", "client", from, "err", err)
			continue
		}
		s.lastSeen.Store(time.Now().UnixNano())
		if r.blackout.Load() {
			r.up.c.received.Add(1)
			r.up.c.dropBlackout.Add(1)
			continue
		}
		r.up.admit(newBuf(rb[:n], s))
	}
}

func (r *Relay) isClosed() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// session returns the client's session, opening it on first use.
func (r *Relay) session(client netip.AddrPort) (*session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sessions[client]; ok {
		return s, nil
	}
	if r.closed {
		return nil, net.ErrClosed
	}
	c, err := net.DialUDP("udp", nil, r.upstream)
	if err != nil {
		return nil, fmt.Errorf("dial upstream: %w", err)
	}
	setBuffers(c)
	s := &session{client: client, conn: c}
	s.lastSeen.Store(time.Now().UnixNano())
	r.sessions[client] = s
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.readUpstream(s) }()
	r.log.Debug("session opened", "client", client, "local", c.LocalAddr())
	return s, nil
}

// readUpstream reads the server's datagrams for one session and feeds the
// down link.
func (r *Relay) readUpstream(s *session) {
	rb := make([]byte, maxDatagram)
	for {
		n, err := s.conn.Read(rb)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// ICMP port unreachable (server not up yet): keep reading.
			continue
		}
		s.lastSeen.Store(time.Now().UnixNano())
		if r.blackout.Load() {
			r.down.c.received.Add(1)
			r.down.c.dropBlackout.Add(1)
			continue
		}
		r.down.admit(newBuf(rb[:n], s))
	}
}

// reapSessions closes sessions idle for longer than SessionIdle.
func (r *Relay) reapSessions() {
	t := time.NewTicker(r.opts.SessionIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-t.C:
			r.mu.Lock()
			for k, s := range r.sessions {
				if now.Sub(time.Unix(0, s.lastSeen.Load())) > r.opts.SessionIdle {
					s.conn.Close()
					delete(r.sessions, k)
					r.log.Debug("session closed (idle)", "client", k)
				}
			}
			r.mu.Unlock()
		}
	}
}

func (r *Relay) sendUp(b *buffer) error {
	_, err := b.s.conn.Write(b.b)
	return err
}

func (r *Relay) sendDown(b *buffer) error {
	_, err := r.ln.WriteToUDPAddrPort(b.b, b.s.client)
	return err
}

// buffer is one datagram in flight.
type buffer struct {
	b   []byte // the payload, sized to fit
	s   *session
	at  time.Time // departure
	seq uint64    // admission order, breaks ties
}

// bufPool recycles buffers; they start at a typical MTU and grow when a
// larger datagram needs them.
var bufPool = sync.Pool{New: func() any { return &buffer{b: make([]byte, 0, 1500)} }}

// newBuf copies a datagram into a pooled buffer.
func newBuf(data []byte, s *session) *buffer {
	b := bufPool.Get().(*buffer)
	b.b = append(b.b[:0], data...)
	b.s = s
	return b
}

func putBuf(b *buffer) {
	b.s = nil
	bufPool.Put(b)
}

// pipe is one direction: the Link model and the delay line.
type pipe struct {
	link        *Link
	send        func(*buffer) error
	spin        time.Duration
	maxInFlight int
	c           dirCounters

	mu    sync.Mutex
	q     delayQueue
	seq   uint64
	wake  chan struct{}
	timer *time.Timer
}

func newPipe(l *Link, o Options, send func(*buffer) error) *pipe {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pipe{link: l, send: send, spin: o.SpinWindow, maxInFlight: o.MaxInFlight, wake: make(chan struct{}, 1), timer: t}
}

// admit runs the link model on a datagram that has just arrived and puts
// it in the delay line, or drops it.
func (p *pipe) admit(b *buffer) {
	p.c.received.Add(1)
	p.mu.Lock()
	at, cause := p.link.Admit(time.Now(), len(b.b))
	if cause == Kept && len(p.q) >= p.maxInFlight {
		cause = DropQueue
	}
	if cause != Kept {
		p.mu.Unlock()
		switch cause {
		case DropRandom:
			p.c.dropRandom.Add(1)
		case DropBurst:
			p.c.dropBurst.Add(1)
		case DropQueue:
			p.c.dropQueue.Add(1)
		}
		putBuf(b)
		return
	}
	b.at, b.seq = at, p.seq
	p.seq++
	heap.Push(&p.q, b)
	first := p.q[0] == b
	p.mu.Unlock()
	if first {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// run sends datagrams when their departure time comes, until done closes.
func (p *pipe) run(done <-chan struct{}) {
	for {
		p.mu.Lock()
		var next *buffer
		if len(p.q) > 0 {
			next = p.q[0]
		}
		p.mu.Unlock()
		if next == nil {
			select {
			case <-done:
				return
			case <-p.wake:
				continue
			}
		}
		if wait := time.Until(next.at); wait > 0 {
			if wait > p.spin {
				p.timer.Reset(wait - max(p.spin, 0))
				select {
				case <-done:
					p.timer.Stop()
					return
				case <-p.wake:
					p.timer.Stop()
					continue // an earlier datagram may have arrived
				case <-p.timer.C:
				}
			}
			for time.Now().Before(next.at) {
				runtime.Gosched()
			}
		}
		p.mu.Lock()
		b := heap.Pop(&p.q).(*buffer)
		p.mu.Unlock()
		// b may differ from next if an earlier one arrived meanwhile; it is
		// due no later than next.
		if err := p.send(b); err != nil {
			p.c.sendErr.Add(1)
		} else {
			p.c.forwarded.Add(1)
			p.c.forwardedBytes.Add(uint64(len(b.b)))
		}
		putBuf(b)
	}
}

// delayQueue is a min-heap of datagrams by departure time, then arrival.
type delayQueue []*buffer

func (q delayQueue) Len() int { return len(q) }
func (q delayQueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q delayQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)   { *q = append(*q, x.(*buffer)) }
func (q *delayQueue) Pop() any {
	old := *q
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return b
}
