package mqtt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// quiot: a client's packets read by one poller for all (QUIOT.md, change
// 20).
//
// A client's reader goroutine waits in a read of its socket for the life
// of the connection. Every packet wakes it through Go's network poller:
// the scheduler runs it, it reads the packet, hands it to a worker
// (change 11), reads again until the socket says EAGAIN and parks, and
// each packet moves the socket's read deadline (the keep-alive) first, a
// timer change. A subscriber's PUBACK, four bytes, cost all of that: at
// 1000 MQTT/TCP subscribers most of the broker's user time beside
// mosquitto's one event loop (docs/BENCH.md).
//
// With Options.PollReads, a plain TCP client (a *net.TCPConn, or a
// ReadFollower over one) is read by the
// server's poller once its session is established: one goroutine waits in
// epoll for all of them (level-triggered), reads what a ready socket has
// in one read, and handles the PUBACKs and PUBCOMPs it finds on the spot
// (they only take locks: no write, no wait). Any other packet, or a
// packet not yet whole, moves the client to a worker (its socket taken
// out of the poll), which reads and handles as the reader did, with the
// read deadline, until nothing is left buffered, and gives the socket
// back to the poll. Each client's packets are still handled one at a time
// and in order: the poller or one worker holds the client (pollState.st).
// The keep-alive is a sweep once a second over the clients that rest in
// the poll (no timer per packet); a client silent for one and a half
// times its keep-alive ends with an error that wraps
// os.ErrDeadlineExceeded, as the read deadline's did.
//
// A polled client has no goroutine of its own: EstablishConnection
// returns a *Polled at once, and what attachClient did after its read
// loop (the will, the hooks' OnDisconnect, the session's end) runs on a
// goroutine started when the client ends, followed by what the
// listener's callers added with Polled.Then (listeners.Continued). A
// client stopped while it rests in the poll (taken over, disconnected by
// the server) is ended by Stop, which tells the poller. TLS,
// WebSocket and QUIC clients, and any connection without a socket of its
// own, keep the read loop and their goroutine.

// ReadFollower is a connection over a socket of its own (its
// SyscallConn) that follows what is read from it (quiot's size watch).
// The poller reads the socket itself and hands each read's result to
// FollowRead, which returns what the connection's Read would have
// returned for it. A connection that wraps a socket without following
// its reads this way is not polled (its Read may do more).
type ReadFollower interface {
	FollowRead(p []byte, n int, err error) (int, error)
}

// pollState is what the poller keeps of a client while it reads for it.
type pollState struct {
	p       *poller
	cl      *Client
	handler ReadFn
	read    func([]byte) (int, error) // reads without waiting (poller.readSocket), on the poller only
	rc      syscall.RawConn
	fl      ReadFollower // follows what is read, or nil
	fd      int
	st      atomic.Int32 // psIdle, psBusy or psEnded
	lastRx  atomic.Int64 // unix nanoseconds of the last bytes read
	pd      *Polled      // what runs when the client ends
	// heldNext: a packet handled on the poller freed quota for a message
	// held for flow control; a worker sends it before the next packet
	// (Server.sendNextHeld). Read and written by the client's holder.
	heldNext bool
	// limit is the keep-alive's bound (one and a half times the client's
	// keep-alive; zero: none), set when the client is adopted: the
	// sweep reads it here rather than in the client (quiot: change 27).
	limit time.Duration
}

// Polled is what EstablishConnection returns for a client the poller
// reads (quiot: poller.go): the connection lives on after the call. When
// the client ends, the functions given to Then run in order on one
// goroutine, each given the error the previous returned, the first the
// error the client's read ended with (what attachClient returned
// before). It implements listeners.Continued.
type Polled struct {
	mu      sync.Mutex
	then    []func(error) error
	err     error
	ended   bool
	running bool
}

// Error says what a Polled is, for callers that treat it as an error.
func (pd *Polled) Error() string { return "mqtt: client read by the poller" }

// Then adds f to what runs when the client has ended, after what was
// added before; if that has all run, f runs now, on the caller.
func (pd *Polled) Then(f func(error) error) {
	pd.mu.Lock()
	if !pd.ended || pd.running {
		pd.then = append(pd.then, f)
		pd.mu.Unlock()
		return
	}
	pd.running = true
	err := pd.err
	pd.mu.Unlock()
	pd.run(f(err))
}

// finish runs what was added, in order, starting with err.
func (pd *Polled) finish(err error) {
	pd.mu.Lock()
	pd.ended, pd.running = true, true
	pd.mu.Unlock()
	pd.run(err)
}

// run runs the functions added until none is left, with running set.
func (pd *Polled) run(err error) {
	pd.mu.Lock()
	for len(pd.then) > 0 {
		f := pd.then[0]
		pd.then[0] = nil
		pd.then = pd.then[1:]
		pd.mu.Unlock()
		err = f(err)
		pd.mu.Lock()
	}
	pd.err, pd.running, pd.then = err, false, nil
	pd.mu.Unlock()
}

// The states of a polled client: resting in the poll with nothing
// buffered; held by the poller or a worker; ended (its goroutine told).
const (
	psIdle int32 = iota
	psBusy
	psEnded
)

// errPollBufferFull is readMore's answer when a packet fills the read
// buffer: the worker reads the rest.
var errPollBufferFull = errors.New("read buffer full")

// poller reads for the polled clients of one server.
type poller struct {
	srv    *Server
	rr     rawRead     // the poller goroutine's socket read
	failed atomic.Bool // the epoll instance failed: no client is polled any more
	once   sync.Once
	err    error // from starting
	ep     *epoll
	mu     sync.Mutex
	fds    map[int]*pollState
	close  chan struct{}
	ended  chan struct{}
	sweeps int // sweeps so far, on the poller goroutine only
}

// newPoller returns a poller for s if its options ask for one, or nil.
func newPoller(s *Server) *poller {
	if s.Options == nil || !s.Options.PollReads || !pollSupported {
		return nil
	}
	return &poller{srv: s, fds: map[int]*pollState{}, close: make(chan struct{}), ended: make(chan struct{})}
}

// start starts the poller's goroutine on first use.
func (p *poller) start() error {
	p.once.Do(func() {
		p.ep, p.err = newEpoll()
		if p.err != nil {
			close(p.ended)
			return
		}
		go p.run()
	})
	return p.err
}

// stop ends the poller's goroutine, if it was started. Clients still
// polled keep their goroutines, which end when the clients are stopped.
func (p *poller) stop() {
	if p == nil {
		return
	}
	started := false
	p.once.Do(func() { close(p.ended) }) // never started: nothing to stop
	select {
	case <-p.ended:
	default:
		started = true
	}
	if started {
		close(p.close)
		p.ep.wake()
		<-p.ended
	}
}

// adopt takes cl, whose session is established, into the poll and
// returns the Polled that runs finish (then what callers add) when the
// client ends; nil if cl cannot be polled (the caller reads as before).
// What came with the CONNECT is handled first, on a worker.
func (p *poller) adopt(cl *Client, handler ReadFn, finish func(error) error) *Polled {
	if p == nil || cl.Net.Conn == nil || cl.Net.bconn == nil || cl.Closed() {
		return nil
	}
	rc, fl, ok := pollableConn(cl.Net.Conn)
	if !ok || p.start() != nil || p.failed.Load() {
		return nil
	}
	ps := &pollState{p: p, cl: cl, handler: handler, rc: rc, fl: fl, pd: &Polled{then: []func(error) error{finish}}}
	ps.read = func(b []byte) (int, error) { return p.readSocket(ps, b) }
	ps.st.Store(psBusy)
	ps.lastRx.Store(time.Now().UnixNano())
	ka := cl.State.Keepalive
	ps.limit = time.Duration(ka+ka/2) * time.Second // [MQTT-3.1.2-22]
	buffered := cl.Net.bconn.Buffered() > 0
	if err := p.add(ps, !buffered); err != nil {
		return nil
	}
	cl.State.polled.Store(ps) // Stop tells the poller from here on
	if buffered {
		p.toWorker(ps)
	} else {
		_ = cl.Net.Conn.SetDeadline(time.Time{}) // the sweep keeps the keep-alive from here
		p.rest(ps)
	}
	return ps.pd
}

// stopped ends a client stopped (Client.Stop) while it rests in the poll
// with what its read loop, waiting in a read, would have got: the read's
// error on the closed connection. A client held by the poller or a
// worker is ended by its holder, which sees it closed (rest).
func (p *poller) stopped(ps *pollState) {
	if !ps.st.CompareAndSwap(psIdle, psEnded) {
		return
	}
	p.remove(ps)
	var fh packets.FixedHeader
	ps.pd.finish(ps.cl.ReadFixedHeader(&fh))
}

// add puts ps in the poll, watched for reading if on.
func (p *poller) add(ps *pollState, on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	cerr := ps.rc.Control(func(fd uintptr) {
		ps.fd = int(fd)
		err = p.ep.add(ps.fd, on)
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("poll client socket: %w", err)
	}
	if old := p.fds[ps.fd]; old != nil && old != ps {
		// quiot (change 27): the number is another socket's now, so old's
		// was closed under it, before a sweep found it (they look every
		// closedEvery seconds): it ends here rather than be forgotten.
		go p.stopped(old)
	}
	p.fds[ps.fd] = ps
	return nil
}

// remove takes ps out of the poll, if it is still there (a socket closed
// meanwhile left the poll by itself; its number may be another's now).
func (p *poller) remove(ps *pollState) {
	ps.cl.State.polled.CompareAndSwap(ps, nil) // its end is under way
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fds[ps.fd] != ps {
		return
	}
	delete(p.fds, ps.fd)
	_ = ps.rc.Control(func(fd uintptr) { p.ep.del(int(fd)) })
}

// end ends a client held by the caller (busy): out of the poll, what
// follows its end started with err on a goroutine of its own (the hooks
// it calls may wait).
func (p *poller) end(ps *pollState, err error) {
	ps.st.Store(psEnded)
	p.remove(ps)
	go ps.pd.finish(err)
}

// rest gives a client held by the caller back to the poll, or ends it if
// it was stopped meanwhile.
func (p *poller) rest(ps *pollState) {
	if ps.cl.Closed() {
		p.end(ps, nil)
		return
	}
	if p.failed.Load() {
		p.end(ps, errPollerFailed)
		return
	}
	ps.st.Store(psIdle)
	if ps.cl.Closed() && ps.st.CompareAndSwap(psIdle, psEnded) {
		p.remove(ps)
		go ps.pd.finish(nil)
	}
}

// errPollerFailed ends the polled clients when the poller's epoll
// instance fails (never seen: epoll_wait fails only on a closed instance).
var errPollerFailed = errors.New("read: the poller failed")

// fail ends every resting client after the epoll instance failed; a
// client held by the poller or a worker ends when it would rest.
func (p *poller) fail(err error) {
	p.failed.Store(true)
	var all []*pollState
	p.mu.Lock()
	for _, ps := range p.fds {
		all = append(all, ps)
	}
	p.mu.Unlock()
	for _, ps := range all {
		if ps.st.CompareAndSwap(psIdle, psEnded) {
			p.remove(ps)
			go ps.pd.finish(fmt.Errorf("%w: %w", errPollerFailed, err))
		}
	}
}

// lookup returns the client polled on fd.
func (p *poller) lookup(fd int) *pollState {
	p.mu.Lock()
	ps := p.fds[fd]
	p.mu.Unlock()
	return ps
}

// run waits for ready sockets and serves them until stop.
func (p *poller) run() {
	defer close(p.ended)
	defer p.ep.close()
	events := make([]pollEvent, 128)
	lastSweep := time.Now()
	for {
		n, err := p.ep.wait(events, 1000)
		select {
		case <-p.close:
			return
		default:
		}
		if err != nil {
			p.fail(err)
			return
		}
		now := time.Now()
		for _, ev := range events[:n] {
			if ev.wake {
				continue
			}
			if ps := p.lookup(ev.fd); ps != nil && ps.st.CompareAndSwap(psIdle, psBusy) {
				p.serve(ps, now)
			}
		}
		if now.Sub(lastSweep) >= time.Second {
			lastSweep = now
			p.sweep(now)
		}
	}
}

// serve reads what ps's socket has and handles the acknowledgements it
// finds; anything else goes to a worker. ps is held (busy).
func (p *poller) serve(ps *pollState, now time.Time) {
	cl := ps.cl
	b := cl.Net.bconn
	n, err := b.readMore(ps.read)
	if n > 0 {
		ps.lastRx.Store(now.UnixNano())
	}
	if err == errPollBufferFull {
		p.toWorker(ps)
		return
	}
	for b.Buffered() > 0 {
		if cl.Closed() {
			p.end(ps, nil)
			return
		}
		if t, whole := b.peekPacket(); !whole || (t != packets.Puback && t != packets.Pubcomp) {
			b.err = err // if any, for the worker after what is buffered
			p.toWorker(ps)
			return
		}
		var fh packets.FixedHeader
		if rerr := cl.ReadFixedHeader(&fh); rerr != nil {
			p.end(ps, rerr)
			return
		}
		cl.State.onPoller = true
		herr := cl.handleNext(&fh, ps.handler)
		cl.State.onPoller = false
		if herr != nil {
			p.end(ps, herr)
			return
		}
		if ps.heldNext {
			b.err = err // if any, for the worker after what is buffered
			p.toWorker(ps)
			return
		}
	}
	b.release()
	if err != nil {
		if cl.Closed() {
			err = nil // the read loop would have stopped before reading
		}
		p.end(ps, err)
		return
	}
	p.rest(ps)
}

// readSocket reads what ps's socket has now into b and has the
// connection follow it (ReadFollower). On the poller's goroutine only.
func (p *poller) readSocket(ps *pollState, b []byte) (int, error) {
	n, err := p.rr.read(ps.rc, b)
	if n == 0 && err == nil {
		return 0, nil // nothing there: nothing to follow
	}
	if ps.fl != nil {
		return ps.fl.FollowRead(b, n, err)
	}
	return n, err
}

// toWorker moves ps, held, to a worker: out of the poll until the worker
// has handled what is buffered.
func (p *poller) toWorker(ps *pollState) {
	_ = ps.rc.Control(func(fd uintptr) { p.ep.mod(int(fd), false) })
	w := takeWorker()
	w.job = handoff{cl: ps.cl, poll: ps}
	w.start <- struct{}{} // the worker gives itself back (worker.run)
}

// drain is a worker's part of a polled client: it reads and handles
// packets as the read loop did until nothing is buffered, then gives the
// socket back to the poll.
func (p *poller) drain(ps *pollState) {
	cl := ps.cl
	if ps.heldNext {
		ps.heldNext = false
		p.srv.sendNextHeld(cl)
	}
	for cl.Net.bconn.Buffered() > 0 {
		if cl.Closed() {
			p.end(ps, nil)
			return
		}
		cl.refreshDeadline(cl.State.Keepalive)
		var fh packets.FixedHeader
		if err := cl.ReadFixedHeader(&fh); err != nil {
			p.end(ps, err)
			return
		}
		if err := cl.handleNext(&fh, ps.handler); err != nil {
			p.end(ps, err)
			return
		}
	}
	if cl.Closed() {
		p.end(ps, nil)
		return
	}
	_ = cl.Net.Conn.SetDeadline(time.Time{})
	ps.lastRx.Store(time.Now().UnixNano())
	cl.Net.bconn.release()
	var err error
	if cerr := ps.rc.Control(func(fd uintptr) { err = p.ep.mod(int(fd), true) }); cerr != nil || err != nil {
		// The socket closed meanwhile: read as the read loop would.
		var fh packets.FixedHeader
		p.end(ps, cl.ReadFixedHeader(&fh))
		return
	}
	p.rest(ps)
}

// sweep ends the resting clients that sent nothing for one and a half
// times their keep-alive, and, every closedEvery sweeps, those whose
// connection was closed under them (net.Conn.Close without Client.Stop: a
// closed socket leaves the epoll instance without an event), with the
// error a read of it gives.
//
// quiot (change 27): a pass over every resting client each second cost
// about 350 ns a client at 10,000 clients, most of it the Control call on
// each socket (its descriptor's lock and the cold cache lines it
// touches) and the client's keep-alive; the keep-alive's bound is now in
// pollState and the closed check runs every closedEvery sweeps (a socket
// closed under its client is found within that many seconds; quiot's
// listener closes what it tracks only at shutdown, after stopping the
// clients).
func (p *poller) sweep(now time.Time) {
	var late, closed []*pollState
	p.sweeps++
	checkClosed := p.sweeps%closedEvery == 0
	p.mu.Lock()
	for _, ps := range p.fds {
		if ps.st.Load() != psIdle {
			continue
		}
		if checkClosed && ps.rc.Control(func(uintptr) {}) != nil {
			closed = append(closed, ps)
			continue
		}
		if ps.limit > 0 && now.Sub(time.Unix(0, ps.lastRx.Load())) > ps.limit {
			late = append(late, ps)
		}
	}
	p.mu.Unlock()
	for _, ps := range late {
		if ps.st.CompareAndSwap(psIdle, psEnded) {
			p.remove(ps)
			go ps.pd.finish(&keepaliveError{limit: ps.limit})
		}
	}
	for _, ps := range closed {
		go p.stopped(ps) // its end runs hooks that may wait: not on the poller
	}
}

// closedEvery is how many sweeps (seconds) apart the sweep looks for
// sockets closed under their clients.
const closedEvery = 4

// keepaliveError ends a polled client that sent nothing for one and a half
// times its keep-alive; it is an os.ErrDeadlineExceeded, as the read
// deadline's error was.
type keepaliveError struct{ limit time.Duration }

func (e *keepaliveError) Error() string {
	return fmt.Sprintf("read: no packet in %v (keep-alive): i/o timeout", e.limit)
}
func (e *keepaliveError) Unwrap() error { return os.ErrDeadlineExceeded }
func (e *keepaliveError) Timeout() bool { return true }

// readMore reads what src has now after the bytes buffered, for the
// poller: into the idle array or a pooled buffer. errPollBufferFull when
// the buffered bytes fill the largest buffer (a large packet: a worker
// reads the rest).
func (b *connReader) readMore(src func([]byte) (int, error)) (int, error) {
	if b.err != nil {
		err := b.err
		b.err = nil
		return 0, err
	}
	switch {
	case b.r == b.w:
		b.r, b.w = 0, 0
		if b.full && b.pool != nil && b.big == nil {
			b.big = b.pool.Get().(*[]byte)
			b.buf = *b.big
		}
	case b.w == len(b.buf):
		switch {
		case b.r > 0:
			b.w = copy(b.buf, b.buf[b.r:b.w])
			b.r = 0
		case b.big == nil && b.pool != nil:
			b.big = b.pool.Get().(*[]byte)
			b.w = copy(*b.big, b.buf[b.r:b.w])
			b.buf, b.r = *b.big, 0
		default:
			return 0, errPollBufferFull
		}
	}
	n, err := src(b.buf[b.w:])
	if n < 0 || n > len(b.buf)-b.w {
		return 0, io.ErrNoProgress
	}
	b.w += n
	b.full = b.w == len(b.buf)
	if n == 0 && err == nil {
		return 0, nil // nothing there: a spurious wake-up
	}
	return n, err
}

// peekPacket returns the type of the next buffered packet and whether it
// is buffered whole: its length as packets.DecodeLength reads it, and its
// body. A length the decoder refuses counts as whole (the decoder reads
// no further). The poller handles a packet on the spot only when it is
// whole by this reading, so decoding it never waits for the socket.
func (b *connReader) peekPacket() (byte, bool) {
	p := b.buf[b.r:b.w]
	if len(p) < 2 {
		return 0, false
	}
	t := p[0] >> 4
	var value, shift uint32
	for i := 1; i < len(p); i++ {
		eb := p[i]
		value |= uint32(eb&127) << shift // as DecodeLength, bytes past the fourth included
		if value > 268435455 {
			return t, true // malformed: the decoder says so
		}
		if eb&128 == 0 {
			return t, uint64(len(p)-i-1) >= uint64(value)
		}
		shift += 7
	}
	return t, false
}
