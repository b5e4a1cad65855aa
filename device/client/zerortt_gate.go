package client

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	h3qlog "github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/internal/sockbuf"
)

// zeroRTTGate orders a client's streams opened in 0-RTT before quic-go's
// handling of the broker's transport parameters.
//
// quic-go v0.65 (issue 4303, open) writes the broker's transport
// parameters (Conn.peerParams) on the connection's goroutine when it reads
// the broker's EncryptedExtensions, and reads them, unsynchronised, when a
// stream is opened (the stream's initial send window): with 0-RTT a stream
// can be opened while the handshake runs. The write comes from a datagram
// the broker sent, which the client's socket reads. The gate holds back the
// datagrams the socket reads from the moment crypto/tls picks a session
// ticket that allows early data (gatedSessionCache.Get, before the
// ClientHello goes out) until the dial has opened its early streams or given
// up (release): over MQTT its one stream (openEarly), over HTTP/3 the
// publish's request stream (openHeld) and http3's control stream
// (awaitControl). The streams are opened before any of the broker's
// datagrams reaches quic-go, and the race is gone. The hold lasts from the
// ClientHello to the return of DialEarly and the opening and writing of
// those streams, far less than a round trip, so no datagram waits in
// practice.
//
// A stream opened after the gate has opened again must wait for the
// handshake (openEarly reports false): quic-go then has applied the
// parameters and closed HandshakeComplete after them.
type zeroRTTGate struct {
	mu     sync.Mutex
	held   bool          // the broker's datagrams are held back
	opened chan struct{} // closed when held ends
	timer  *time.Timer   // ends a hold that no dial ended (zeroRTTGateMax)
}

// zeroRTTGateMax ends a hold that no dial ended: crypto/tls offered early data
// from a ticket, but quic-go did not take it (a ticket from another quic-go
// version), so DialEarly waits for the full handshake, which needs the
// broker's datagrams; or a 0-RTT publish over HTTP/3 waits for another
// request's answer to learn whether its credentials were bound
// (h3Client.authorize). It never ends a hold in the ordinary case, which
// lasts microseconds.
const zeroRTTGateMax = 2 * time.Second

// hold starts holding back the broker's datagrams.
func (g *zeroRTTGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		return
	}
	g.held = true
	g.opened = make(chan struct{})
	g.timer = time.AfterFunc(zeroRTTGateMax, g.release)
}

// release lets the held datagrams through; a no-op without a hold.
func (g *zeroRTTGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.held {
		return
	}
	g.held = false
	g.timer.Stop()
	close(g.opened)
}

// openEarly runs open, which opens a stream in 0-RTT, while the broker's
// datagrams are held back, then lets them through. It reports false, without
// running open, when nothing is held: the stream must then wait for the
// handshake.
func (g *zeroRTTGate) openEarly(open func()) bool {
	g.mu.Lock()
	if !g.held {
		g.mu.Unlock()
		return false
	}
	open()
	g.held = false
	g.timer.Stop()
	close(g.opened)
	g.mu.Unlock()
	return true
}

// openHeld runs open, which opens a stream in 0-RTT, while the broker's
// datagrams are held back, and keeps holding them (the caller releases);
// it reports false, without running open, when nothing is held.
func (g *zeroRTTGate) openHeld(open func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.held {
		return false
	}
	open()
	return true
}

// wait blocks while datagrams are held back.
func (g *zeroRTTGate) wait() {
	g.mu.Lock()
	held, ch := g.held, g.opened
	g.mu.Unlock()
	if held {
		<-ch
	}
}

// testHookEarlyDialed, when set by a test, runs when a dial returned a
// connection in 0-RTT, before the MQTT stream or the HTTP/3 request stream
// is opened in it.
var testHookEarlyDialed func()

// gateConn is a client socket whose reads wait at the gate.
type gateConn struct {
	sockbuf.Conn // passes quic-go's buffer sizing through
	gate         *zeroRTTGate
}

// newGateConn returns pc with its reads held back by g.
func newGateConn(pc net.PacketConn, g *zeroRTTGate) *gateConn {
	return &gateConn{Conn: sockbuf.Wrap(pc), gate: g}
}

// ReadFrom implements net.PacketConn: a datagram read while the gate holds
// is returned once it opens.
func (c *gateConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	c.gate.wait()
	return n, a, err
}

// gatedSessionCache is the session cache of one 0-RTT dial: when crypto/tls
// takes a ticket that allows early data from it, the gate starts to hold.
type gatedSessionCache struct {
	tls.ClientSessionCache
	gate *zeroRTTGate
}

// Get implements tls.ClientSessionCache.
func (c gatedSessionCache) Get(key string) (*tls.ClientSessionState, bool) {
	cs, ok := c.ClientSessionCache.Get(key)
	if ok && cs != nil {
		if _, st, err := cs.ResumptionState(); err == nil && st != nil && st.EarlyData {
			c.gate.hold()
		}
	}
	return cs, ok
}

// gateSessions makes tc's session cache hold g when a ticket allows early
// data; without a cache it does nothing.
func gateSessions(tc *tls.Config, g *zeroRTTGate) {
	if tc.ClientSessionCache != nil {
		tc.ClientSessionCache = gatedSessionCache{ClientSessionCache: tc.ClientSessionCache, gate: g}
	}
}

// HTTP/3: quic-go's http3 opens the client's control stream (SETTINGS) on
// a goroutine of its own as soon as the connection is made, so in 0-RTT it
// too reads the broker's parameters unsynchronised. The only signal that it
// is open is the qlog event http3 records right after opening it:
// controlWatch is the connection's qlog trace, and it tells when that
// event came. Without a tracer of the client's own it records nothing
// else: the transport's producer (the first) gets none, so quic-go
// records no transport events.

// controlWatch is the qlog trace of an HTTP/3 connection dialled with 0-RTT
// allowed; inner is the client's own tracer's trace, if any.
type controlWatch struct {
	inner  qlogwriter.Trace
	added  atomic.Int32
	opened chan struct{} // closed once the control stream is open
	once   sync.Once
}

// watchControlStream returns a quic.Config.Tracer that wraps tracer (nil:
// none) in a controlWatch.
func watchControlStream(tracer func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace) func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	return func(ctx context.Context, isClient bool, id quic.ConnectionID) qlogwriter.Trace {
		w := &controlWatch{opened: make(chan struct{})}
		if tracer != nil {
			w.inner = tracer(ctx, isClient, id)
		}
		return w
	}
}

// AddProducer implements qlogwriter.Trace.
func (w *controlWatch) AddProducer() qlogwriter.Recorder {
	first := w.added.Add(1) == 1
	if w.inner == nil {
		if first {
			return nil // quic-go's transport producer: no events to build
		}
		return &controlRecorder{w: w}
	}
	return &controlRecorder{w: w, inner: w.inner.AddProducer()}
}

// controlRecorder is a producer of a controlWatch.
type controlRecorder struct {
	w     *controlWatch
	inner qlogwriter.Recorder
}

// RecordEvent implements qlogwriter.Recorder.
func (r *controlRecorder) RecordEvent(ev qlogwriter.Event) {
	if st, ok := ev.(h3qlog.StreamTypeSet); ok && st.StreamType == h3qlog.StreamTypeControl && st.Initiator == h3qlog.InitiatorLocal {
		r.w.once.Do(func() { close(r.w.opened) })
	}
	if r.inner != nil {
		r.inner.RecordEvent(ev)
	}
}

// Close implements qlogwriter.Recorder.
func (r *controlRecorder) Close() error {
	if r.inner != nil {
		return r.inner.Close()
	}
	return nil
}

// awaitControl waits until qc's HTTP/3 control stream is open (or qc or
// ctx ended); it returns at once when qc was not dialled with a
// controlWatch.
func awaitControl(ctx context.Context, qc *quic.Conn) {
	w, ok := qc.QlogTrace().(*controlWatch)
	if !ok {
		return
	}
	select {
	case <-w.opened:
	case <-qc.Context().Done():
	case <-ctx.Done():
	}
}
