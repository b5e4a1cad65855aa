package quicgov

import (
	"bytes"
	"cmp"
	"container/list"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quiot/quiot/internal/sockbuf"
)

// Defaults of Options.
const (
	// DefaultMaxPeers caps each of the governor's three tables (answer
	// times per peer IP, handshakes per peer address, the client's
	// connection IDs per address: Initials seen and 0-RTT datagrams kept):
	// about 100 bytes an entry, plus the probes a handshake holds (at most
	// maxHeld datagrams, and maxHeldBytes over all handshakes) and the
	// 0-RTT datagrams kept (maxEarlyBytes over all).
	DefaultMaxPeers = 4096
	// DefaultHoldFactor times the peer's answer time is how long after the
	// first flight the probes are held.
	DefaultHoldFactor = 1.5
	// DefaultMaxHold caps the hold.
	DefaultMaxHold = 10 * time.Second
)

const (
	// flightGap: long-header datagrams within it of a handshake's first one
	// belong to the first flight and pass.
	flightGap = 20 * time.Millisecond
	// copyShare: first-flight copies go the answer time / copyShare after
	// the flight (Options.FirstFlightCopies). Sent at once, they queued
	// on a slow downlink ahead of the server's answer to the client's
	// 0-RTT data whenever that needed a 0-RTT datagram after the client's
	// first (on nbiot, 0.17 s behind it): the median warm wake-up went
	// from 1.04x to 1.31x its floor (docs/results/nbiot/README.md). A
	// quarter (0.37 s on nbiot) leaves room for that datagram and costs a
	// lost first datagram a quarter of the answer time more than a copy
	// sent at once would.
	copyShare = 4
	// reactGap: a long-header datagram sent within it of a datagram from
	// the peer answers that datagram (the rest of a flight the
	// anti-amplification limit held back, an ACK) and passes.
	reactGap = 10 * time.Millisecond
	// maxHeld is how many probe datagrams one handshake holds; older ones
	// are dropped (the later probes carry the same handshake data).
	maxHeld = 4
	// maxHeldBytes bounds the bytes held over all handshakes; beyond it,
	// probes pass. First-flight copies have a bound of the same size of
	// their own; beyond it, datagrams are not kept for copies.
	maxHeldBytes = 1 << 20
	// handshakeAge: a handshake entry older than this is forgotten when
	// the next long-header datagram goes to its address.
	handshakeAge = time.Minute
)

// Options configure a Conn. The zero value is usable.
type Options struct {
	// MaxPeers caps the table of answer times (one entry per peer IP),
	// the table of handshakes (one per peer address) and the table of the
	// client's connection IDs (one per address and ID), each evicting its
	// least recently used entry; zero means DefaultMaxPeers.
	MaxPeers int
	// HoldFactor: probes are held until HoldFactor x the peer IP's answer
	// time after the first flight; zero means DefaultHoldFactor.
	HoldFactor float64
	// MaxHold caps the hold; zero means DefaultMaxHold.
	MaxHold time.Duration
	// EarlyAge: a 0-RTT datagram that came before its Initial is kept
	// for the longer of EarlyAge and 2 x the peer IP's answer time (the
	// latter capped at MaxHold), then handed to quic-go anyway; zero
	// means DefaultEarlyAge.
	EarlyAge time.Duration
	// FirstFlightCopies: for a peer IP with an answer time, the
	// server's long-header datagrams of a new handshake's first flight
	// (those within flightGap of its first) are sent once more a quarter
	// of the answer time after it (at least flightGap), unless a
	// Handshake or 1-RTT packet came from the peer first: on a slow
	// downlink the copies queue behind the flight and the server's answer
	// to the client's 0-RTT data, and when the flight's first datagram is
	// lost the copy arrives that quarter and one datagram's airtime later
	// instead of after a probe (docs/TUNING.md, "First-flight copies");
	// the server's short-header datagrams to the peer before the copies
	// go (its answer to 0-RTT data) are copied too, first (at most
	// maxShortCopies); at most maxHeld datagrams a handshake are copied
	// of the first flight, and only as many
	// as keep what the server sent the address, copies included, within
	// three times what it received from it (amplification). Default off.
	FirstFlightCopies bool
	// Logger receives debug records of held, dropped and released probes;
	// nil discards them.
	Logger *slog.Logger
}

// Stats count what a Conn did with the server's probes.
type Stats struct {
	// Held counts long-header datagrams held back.
	Held int64
	// Dropped counts held datagrams dropped: the handshake progressed, or
	// a later probe took their place.
	Dropped int64
	// Released counts held datagrams sent when the hold ended without
	// progress (a lost flight or answer: real loss is still repaired),
	// or earlier, on the peer's Initial probe (ReleasedOnProbe).
	Released int64
	// ReleasedOnProbe counts the held datagrams of Released sent because
	// an Initial packet came from the peer at least its answer time after
	// the first flight: the peer evidently lacks the first flight.
	ReleasedOnProbe int64
	// Samples counts answer times learned.
	Samples int64
	// Unlearned counts handshakes that progressed after their hold was
	// released (at its end or on the peer's probe, with or without held
	// datagrams): their answer time measures a repair, not the path, and
	// is not learned.
	Unlearned int64
	// Copied counts first-flight datagrams sent twice
	// (Options.FirstFlightCopies).
	Copied int64
	// CopiesOverBudget counts first-flight datagrams not sent twice
	// because the copy would have sent the address more than
	// amplification times the bytes of long-header datagrams it sent.
	CopiesOverBudget int64
	// ZeroRTTHeld counts client datagrams with a 0-RTT packet first that
	// were kept because their Initial had not come (early.go).
	ZeroRTTHeld int64
	// ZeroRTTMatched counts those handed to quic-go right after the
	// datagram with their Initial.
	ZeroRTTMatched int64
	// ZeroRTTExpired counts those handed to quic-go without their
	// Initial: kept too long, or their entry evicted.
	ZeroRTTExpired int64
}

// Conn is the probe governor: a net.PacketConn for a QUIC server (a
// quic.Transport's Conn) that holds back the server's handshake probes.
//
// quic-go (v0.65) probes an unanswered handshake after 2 x 100 ms until
// the connection has an RTT sample of its own, whatever the RTT a token
// restored, so a server answering a client on a 600 ms link sends padded
// 1200-byte Initial and Handshake probes at about 200 ms, 400 ms and 1 s
// after its first flight; on a 25 kbit/s downlink each takes 393 ms of
// airtime, queued ahead of the server's answer to the client's 0-RTT data.
//
// Conn learns, per peer IP, the answer time: from the server's first
// long-header datagram to a new connection until the first datagram from
// the peer that carries a Handshake or a 1-RTT packet (the client got the
// first flight). For a peer IP with an answer time, long-header datagrams
// sent to the same address after the first flight (beyond flightGap),
// and not right after a datagram from the peer (reactGap), are held until
// HoldFactor x the answer time after the first flight: they are dropped
// once a Handshake or 1-RTT packet arrives from the peer (the handshake
// progressed; quic-go stops probing), and sent if the hold ends without
// it, or as soon as a datagram with an Initial packet (and no Handshake or
// 1-RTT packet) arrives from the peer at least the answer time after the
// first flight: the client is still probing with its Initial when the
// first flight should have reached it, so it evidently lacks it, and the
// held probes carry what it needs. Released datagrams without an Initial
// packet go before those with one. Short-header datagrams, and everything
// to peers without an answer time (a first connection), pass unchanged.
//
// With Options.FirstFlightCopies, Conn sends the first flight of a
// handshake with a peer IP that has an answer time twice: the copies go a
// quarter of the answer time after its first datagram (behind the flight
// and the answer to the client's 0-RTT data on the link), unless a
// Handshake or 1-RTT packet came from the peer first; at most maxHeld
// datagrams a handshake are kept for that. quic-go's client drops the
// duplicates (duplicate packet numbers, or Initial keys already dropped)
// without answering them.
//
// Conn also keeps the client's 0-RTT datagrams that arrive before their
// Initial (early.go): a datagram whose first packet is a 0-RTT packet
// (QUIC v1 or v2), for a destination connection ID whose Initial has not
// come from the same address, is kept, and read (ReadFrom, ReadMsgUDP,
// ReadBatch, with the control messages it came with) right after the
// datagram with that Initial. quic-go (v0.65) keeps such packets itself
// only until a packet for its server arrives more than 100 ms after them;
// when the client's first datagram is lost on a slow uplink, its Initial
// probe comes seconds later, and a later 0-RTT datagram of the client or
// another client's first datagram in between made quic-go drop the 0-RTT
// data. Bounds, beyond
// which a 0-RTT datagram passes unchanged: maxEarlyPerConn datagrams per
// connection ID, maxEarlyBytes over all, maxEarlyConns connection IDs
// with datagrams kept, MaxPeers entries in the table of connection IDs
// (Initials seen, datagrams kept; least recently used evicted). A
// datagram is kept at most max(EarlyAge, 2 x the peer IP's answer time,
// the latter capped at MaxHold); when that ends, or its entry is evicted,
// it is read anyway with the next datagram (quic-go drops it as before
// unless its Initial follows).
//
// A Conn from New is not an OOBCapablePacketConn: quic-go reads and
// writes it one datagram at a time, without GSO, ECN, batched reads or the
// packet info that picks the source address of a socket bound to a
// wildcard address on a multi-homed host. Wrap of a *net.UDPConn on Linux
// keeps all of them (oob_linux.go; docs/results/nbiot/README.md).
type Conn struct {
	sockbuf.Conn // passes quic-go's buffer sizing through
	opts         Options
	log          *slog.Logger

	now       func() time.Time                          // test seam
	afterFunc func(time.Duration, func()) (stop func()) // test seam
	// send writes a released datagram with the control messages it was
	// written with (oob_linux.go); nil: WriteTo.
	send func(p, oob []byte, to net.Addr) error

	mu   sync.Mutex
	rtts *lru[netip.Addr, time.Duration]
	hs   *lru[netip.AddrPort, *handshake]
	// rx counts what peer addresses sent in long-header datagrams
	// lately: the budget of first-flight copies (FirstFlightCopies).
	rx *lru[netip.AddrPort, *rxCount]
	// copying is the number of handshakes with copies pending: while it
	// is 0, short-header datagrams are written without a look at hs.
	copying   atomic.Int32
	heldBytes int
	copyBytes int // of the datagrams kept for first-flight copies
	stats     Stats

	// The client's 0-RTT datagrams kept until their Initial (early.go).
	early      *lru[earlyKey, *early]
	earlyHeld  *list.List   // of *early with datagrams kept, oldest first
	pending    []inbound    // released, to be read before the socket
	earlyBytes int          // of the datagrams kept and pending
	earlyN     atomic.Int64 // datagrams kept and pending
}

// handshake is the governor's state of one peer address.
type handshake struct {
	dcid       []byte    // destination connection ID of the server's packets
	start      time.Time // the first long-header datagram to the address
	hold       time.Duration
	answer     time.Duration // the peer IP's answer time when the handshake began
	lastRecv   time.Time
	progressed bool
	released   bool
	held       []heldDatagram
	dst        net.Addr
	stop       func()
	copies     []heldDatagram // the first flight, to send again (FirstFlightCopies)
	copyDst    net.Addr
	copyStop   func() // stops the timer that sends copies
	// sent counts the bytes written to the address since the handshake
	// began while copies are pending (held datagrams included: the
	// budget errs on the safe side).
	sent        int
	shortCopies int // short-header datagrams among copies
}

// maxShortCopies is how many short-header datagrams a handshake's copies
// take (sentShort).
const maxShortCopies = 2

// amplification bounds first-flight copies as RFC 9000 §8.1 bounds a
// server before it has validated the client's address: what the server
// sends an address, copies included, stays within three times what it
// received from it. quic-go keeps its own datagrams within that limit
// but does not see the copies; a client with a token is validated and
// quic-go lifts the limit, which the governor cannot tell, so the copies
// keep to it always. A resumed wake-up's first flight (one 1200-byte
// datagram against the client's 1200 or more) is copied whole.
const amplification = 3

// rxCount is what one peer address sent in long-header datagrams since
// since.
type rxCount struct {
	bytes int
	since time.Time
}

// heldDatagram is a datagram held back, with its control messages (ECN,
// source address) when written with WriteMsgUDP.
type heldDatagram struct{ p, oob []byte }

// New returns pc governed.
func New(pc net.PacketConn, o Options) *Conn {
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.HoldFactor <= 0 {
		o.HoldFactor = DefaultHoldFactor
	}
	if o.MaxHold <= 0 {
		o.MaxHold = DefaultMaxHold
	}
	if o.EarlyAge <= 0 {
		o.EarlyAge = DefaultEarlyAge
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{Conn: sockbuf.Wrap(pc), opts: o, log: log, now: time.Now, afterFunc: realAfterFunc}
	c.rtts = newLRU[netip.Addr, time.Duration](o.MaxPeers, nil)
	c.hs = newLRU[netip.AddrPort, *handshake](o.MaxPeers, c.evicted)
	c.rx = newLRU[netip.AddrPort, *rxCount](o.MaxPeers, nil)
	c.early = newLRU[earlyKey, *early](o.MaxPeers, c.earlyEvicted)
	c.earlyHeld = list.New()
	return c
}

// Wrap returns pc governed when on (New with default options and log),
// else pc. On Linux, a *net.UDPConn stays what quic-go needs for GSO, ECN,
// batched reads and the source address of replies (oob_linux.go);
// elsewhere the result exposes pc's file descriptor when pc has one
// (syscall.Conn), so quic-go still sets the Don't Fragment bit and the
// buffer sizes.
func Wrap(pc net.PacketConn, on bool, log *slog.Logger) net.PacketConn {
	return WrapWith(pc, on, Options{Logger: log})
}

// WrapWith is Wrap with options o.
func WrapWith(pc net.PacketConn, on bool, o Options) net.PacketConn {
	if !on || pc == nil {
		return pc
	}
	c := New(pc, o)
	if o, ok := oobWrap(c, pc); ok {
		return o
	}
	if sc, ok := pc.(syscall.Conn); ok {
		return sysConn{Conn: c, sc: sc}
	}
	return c
}

func realAfterFunc(d time.Duration, f func()) func() {
	t := time.AfterFunc(d, f)
	return func() { t.Stop() }
}

func (c *Conn) governor() *Conn { return c }

// Stats returns the counters so far.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// AnswerTime returns the answer time learned for ip (0: none).
func (c *Conn) AnswerTime(ip netip.Addr) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, _ := c.rtts.get(ip.Unmap())
	return d
}

// WriteTo implements net.PacketConn.
func (c *Conn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if len(p) > 0 && p[0]&0x80 != 0 && c.hold(p, nil, addr) {
		return len(p), nil
	}
	if len(p) > 0 && p[0]&0x80 == 0 {
		c.sentShort(p, nil, addr)
	}
	return c.PacketConn.WriteTo(p, addr)
}

// sentShort notes short-header datagram p (control messages oob) written
// to addr while a handshake with the address has copies pending: its
// bytes count against their budget, and until they go it is copied with
// them (at most maxShortCopies a handshake): the server's answer to the
// client's 0-RTT data, whose loss quic-go repairs only at its probe
// timeout.
func (c *Conn) sentShort(p, oob []byte, addr net.Addr) {
	if c.copying.Load() == 0 {
		return
	}
	ap, ok := addrPort(addr)
	if !ok {
		return
	}
	c.mu.Lock()
	if h, ok := c.hs.peek(ap); ok && h.copyStop != nil {
		h.sent += len(p)
		if !h.progressed && h.shortCopies < maxShortCopies && c.keepCopy(h, p, oob) {
			h.shortCopies++
		}
	}
	c.mu.Unlock()
}

// ReadFrom implements net.PacketConn. It returns the 0-RTT datagrams
// released since the last call before it reads the socket, and reads
// again when it keeps the datagram it read (early.go).
func (c *Conn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		if d, ok := c.nextPending(); ok {
			return copy(p, d.p), d.addr, nil
		}
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || n == 0 || !c.admit(p[:n], nil, 0, addr) {
			return n, addr, err
		}
	}
}

// Close drops what is held and closes the socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	for _, h := range c.hs.values() {
		c.dropHeld(h)
	}
	c.dropEarly()
	c.mu.Unlock()
	return c.PacketConn.Close()
}

// hold decides about long-header datagram p (control messages oob) to
// addr; true means Conn keeps (or dropped) it.
func (c *Conn) hold(p, oob []byte, addr net.Addr) bool {
	k, err := Parse(p)
	if err != nil || k&(Retry|VersionNegotiation) != 0 {
		return false // stateless answers start no handshake
	}
	ap, ok := addrPort(addr)
	if !ok {
		return false
	}
	dcid := DestConnID(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	h, ok := c.hs.get(ap)
	if !ok || now.Sub(h.start) > handshakeAge || !bytes.Equal(h.dcid, dcid) {
		if ok {
			c.dropHeld(h)
		}
		rtt, _ := c.rtts.get(ap.Addr())
		hold := time.Duration(float64(rtt) * c.opts.HoldFactor)
		h = &handshake{dcid: bytes.Clone(dcid), start: now, hold: min(hold, c.opts.MaxHold), answer: rtt}
		c.hs.put(ap, h)
		if c.opts.FirstFlightCopies && rtt > 0 && c.keepCopy(h, p, oob) {
			h.copyDst = addr
			h.sent = len(p)
			h.copyStop = c.afterFunc(max(flightGap, rtt/copyShare), func() { c.sendCopies(ap, h) })
			c.copying.Add(1)
		}
		return false
	}
	since := now.Sub(h.start)
	if h.copyStop != nil {
		h.sent += len(p)
	}
	if since < flightGap && h.copyStop != nil && !h.progressed && len(h.copies) < maxHeld {
		c.keepCopy(h, p, oob)
	}
	switch {
	case h.hold == 0, h.progressed, h.released, since < flightGap, since >= h.hold,
		!h.lastRecv.IsZero() && now.Sub(h.lastRecv) < reactGap,
		c.heldBytes+len(p) > maxHeldBytes:
		return false
	}
	h.held = append(h.held, heldDatagram{bytes.Clone(p), bytes.Clone(oob)})
	h.dst = addr
	c.heldBytes += len(p)
	c.stats.Held++
	if len(h.held) > maxHeld {
		c.heldBytes -= len(h.held[0].p)
		h.held = h.held[1:]
		c.stats.Dropped++
	}
	if h.stop == nil {
		h.stop = c.afterFunc(h.hold-since, func() { c.release(ap, h, false) })
	}
	c.log.Debug("quicgov: probe held", "peer", ap, "after", since, "hold", h.hold)
	return true
}

// received notes datagram p from addr.
func (c *Conn) received(p []byte, addr net.Addr) {
	ap, ok := addrPort(addr)
	if !ok {
		return
	}
	var progress, initial bool
	if p[0]&0x80 == 0 {
		progress = p[0]&0x40 != 0
	} else {
		k, _ := Parse(p)
		progress = k&(Handshake|Short) != 0
		initial = k&Initial != 0
	}
	c.mu.Lock()
	now := c.now()
	if c.opts.FirstFlightCopies && p[0]&0x80 != 0 {
		r, ok := c.rx.get(ap)
		if !ok || now.Sub(r.since) > handshakeAge {
			r = &rxCount{since: now}
			c.rx.put(ap, r)
		}
		r.bytes += len(p)
	}
	h, ok := c.hs.peek(ap)
	if !ok {
		c.mu.Unlock()
		return
	}
	h.lastRecv = now
	if !progress && initial && h.answer > 0 && !h.progressed && !h.released &&
		now.Sub(h.start) >= h.answer {
		// The client's Initial probe when the first flight should long
		// have reached it: it lacks it, and the held probes are its repair.
		c.mu.Unlock()
		c.release(ap, h, true)
		return
	}
	defer c.mu.Unlock()
	if !progress || h.progressed {
		return
	}
	h.progressed = true
	if !h.released {
		c.learn(ap.Addr(), now.Sub(h.start))
	} else {
		c.stats.Unlearned++
	}
	if n := len(h.held); n > 0 {
		c.log.Debug("quicgov: held probes dropped, handshake progressed", "peer", ap, "n", n)
	}
	c.dropHeld(h)
}

// learn records answer time d for ip (a smoothed value: 3/4 the old one,
// 1/4 the new sample).
func (c *Conn) learn(ip netip.Addr, d time.Duration) {
	if d <= 0 {
		return
	}
	if old, ok := c.rtts.get(ip); ok {
		d = (3*old + d) / 4
	}
	c.rtts.put(ip, d)
	c.stats.Samples++
}

// release sends what h holds when its hold ends without progress, or
// (onProbe) when the peer's Initial probe shows it lacks the first
// flight; what the server sends to ap after it passes.
func (c *Conn) release(ap netip.AddrPort, h *handshake, onProbe bool) {
	c.mu.Lock()
	if cur, ok := c.hs.peek(ap); !ok || cur != h || h.progressed || h.released {
		c.mu.Unlock()
		return
	}
	if onProbe && h.stop != nil {
		h.stop()
	}
	held, dst := h.held, h.dst
	h.held, h.stop, h.released = nil, nil, true
	for _, d := range held {
		c.heldBytes -= len(d.p)
	}
	c.stats.Released += int64(len(held))
	why := "no progress within the hold"
	if onProbe {
		c.stats.ReleasedOnProbe += int64(len(held))
		why = "the peer's Initial probe came after its answer time"
	}
	c.mu.Unlock()
	if len(held) > 0 {
		c.log.Debug("quicgov: held probes released", "peer", ap, "n", len(held), "why", why)
	}
	// Datagrams without an Initial packet go first: a client that lacks
	// the server's Initial keeps the Handshake packets until it has it
	// (so this order costs nothing then), and one that already has it
	// (the server's Initial probe passed on the client's own, reactGap)
	// gets the Handshake data without a padded Initial ahead of it.
	slices.SortStableFunc(held, func(a, b heldDatagram) int {
		return cmp.Compare(hasInitial(a.p), hasInitial(b.p))
	})
	c.sendAll(held, dst, ap, "quicgov: releasing a held probe")
}

// sendAll writes ds to dst with the control messages each was written
// with, and logs a failed write as what (ap: the peer).
func (c *Conn) sendAll(ds []heldDatagram, dst net.Addr, ap netip.AddrPort, what string) {
	for _, d := range ds {
		var err error
		if c.send != nil {
			err = c.send(d.p, d.oob, dst)
		} else {
			_, err = c.PacketConn.WriteTo(d.p, dst)
		}
		if err != nil {
			c.log.Debug(what, "peer", ap, "err", err)
		}
	}
}

// sendCopies sends the copies of h's first flight when their time came
// without progress.
func (c *Conn) sendCopies(ap netip.AddrPort, h *handshake) {
	c.mu.Lock()
	if cur, ok := c.hs.peek(ap); !ok || cur != h || h.progressed || h.copyStop == nil {
		c.mu.Unlock()
		return
	}
	budget := -h.sent
	if r, ok := c.rx.peek(ap); ok {
		budget += amplification * r.bytes
	}
	// Short-header datagrams first: a few bytes, the answer to 0-RTT
	// data, which would otherwise wait behind a padded 1200-byte copy
	// (393 ms on a 25 kbit/s downlink); a client that lacks the first
	// datagram keeps them until the handshake's copy makes them
	// readable.
	slices.SortStableFunc(h.copies, func(a, b heldDatagram) int {
		return cmp.Compare(a.p[0]>>7, b.p[0]>>7)
	})
	var cs []heldDatagram
	for i, d := range h.copies {
		if len(d.p) > budget {
			c.stats.CopiesOverBudget += int64(len(h.copies) - i)
			break
		}
		budget -= len(d.p)
		cs = append(cs, d)
	}
	dst := h.copyDst
	c.forgetCopies(h)
	h.copyStop = nil
	c.copying.Add(-1)
	c.stats.Copied += int64(len(cs))
	c.mu.Unlock()
	c.log.Debug("quicgov: first flight copied", "peer", ap, "n", len(cs))
	c.sendAll(cs, dst, ap, "quicgov: sending a first-flight copy")
}

// hasInitial is 1 for a datagram with an Initial packet, else 0 (the
// order in which release sends them).
func hasInitial(p []byte) int {
	if k, _ := Parse(p); k&Initial != 0 {
		return 1
	}
	return 0
}

// keepCopy keeps datagram p (control messages oob) for h's first-flight
// copies unless that would take the copies of all handshakes past
// maxHeldBytes; c.mu is held.
func (c *Conn) keepCopy(h *handshake, p, oob []byte) bool {
	if c.copyBytes+len(p) > maxHeldBytes {
		return false
	}
	c.copyBytes += len(p)
	h.copies = append(h.copies, heldDatagram{bytes.Clone(p), bytes.Clone(oob)})
	return true
}

// forgetCopies forgets the datagrams kept for h's copies; c.mu is held.
func (c *Conn) forgetCopies(h *handshake) {
	for _, d := range h.copies {
		c.copyBytes -= len(d.p)
	}
	h.copies = nil
}

// dropHeld forgets what h holds, and the copies of its first flight not
// sent; c.mu is held.
func (c *Conn) dropHeld(h *handshake) {
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	if h.copyStop != nil {
		h.copyStop()
		h.copyStop = nil
		c.copying.Add(-1)
	}
	c.forgetCopies(h)
	for _, d := range h.held {
		c.heldBytes -= len(d.p)
	}
	c.stats.Dropped += int64(len(h.held))
	h.held = nil
}

// evicted is the handshake table's eviction callback; c.mu is held.
func (c *Conn) evicted(_ netip.AddrPort, h *handshake) { c.dropHeld(h) }

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	if u, ok := a.(*net.UDPAddr); ok {
		ap := u.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.IsValid()
	}
	if a == nil {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// sysConn is a Conn over a socket with a file descriptor: it exposes it,
// so that quic-go sets the Don't Fragment bit and sizes the buffers as on
// a *net.UDPConn; it still reads and writes through Conn one datagram at a
// time (no ReadMsgUDP, WriteMsgUDP).
type sysConn struct {
	*Conn
	sc syscall.Conn
}

// SyscallConn implements syscall.Conn.
func (s sysConn) SyscallConn() (syscall.RawConn, error) { return s.sc.SyscallConn() }
