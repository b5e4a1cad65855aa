package mqttquic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/internal/quicgov"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/srcvalid"
	"github.com/quiot/quiot/internal/streamconn"
)

// ALPN is the TLS application protocol of MQTT over QUIC (EMQX, NanoMQ).
const ALPN = "mqtt"

// ListenerConfig configures a QUICListener.
type ListenerConfig struct {
	// ID names the listener in mochi; empty means "mqtt-quic".
	ID string
	// StatelessResetKey, when set, makes the transport answer packets of
	// unknown connections with stateless resets (see broker/store.ResetKey);
	// nil means none.
	StatelessResetKey *quic.StatelessResetKey
	// Address is the UDP address to bind when PacketConn is nil; empty
	// means ":14567".
	Address string
	// PacketConn, when set, is the UDP socket (e.g. a counting wrapper);
	// the listener does not close it.
	PacketConn net.PacketConn
	// TLS is the server TLS configuration (required). NextProtos is
	// replaced by ALPN "mqtt".
	TLS *tls.Config
	// Tuning is the QUIC tuning profile the listener's quic.Config is
	// built from (and whether a probe governor runs on its socket:
	// internal/quicgov); nil means quictune.Default().
	Tuning *quictune.Profile
	// Tracer, when set, is installed in the listener's quic.Config.
	Tracer func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace
	// StreamTimeout bounds the wait for the client's MQTT stream after the
	// handshake; zero means 10 s.
	StreamTimeout time.Duration
	// CloseGrace is how long, after a session that ended with a CONNACK or
	// DISCONNECT, the listener waits for the peer to close before closing
	// the connection itself (so the last packet is delivered); zero means
	// 2 s.
	CloseGrace time.Duration
	// OnConn, when set, is called with +1 when a QUIC connection is accepted
	// and -1 when it ends (for the broker's per-protocol gauges).
	OnConn func(delta int)
	// RetryAbove is the number of handshakes in progress from addresses
	// not yet validated from which a new connection attempt must first
	// prove its source address (a QUIC Retry, one more round trip; its
	// 0-RTT data is then sent again after the Retry), before the
	// listener hands it on to be charged per address: zero means 64
	// (srcvalid.DefaultThreshold), a negative value a Retry for every new
	// connection (Limits.QUICRetryAbove, docs/security.md).
	RetryAbove int
	// Admit, when set, charges a connection to its source address until
	// its MQTT stream is handed on or the connection ends: from its first
	// packet when the address is validated (a refused attempt is refused
	// at once, CONNECTION_REFUSED), otherwise once its handshake
	// completed (a refused connection is closed with CodeRefused). It
	// returns the function that frees the charge (called once), or an
	// error when the address is at its bound. Handshakes from addresses
	// not validated are bounded by RetryAbove instead, so that spoofed
	// packets cannot use another address's share.
	Admit func(addr net.Addr) (release func(), err error)
}

// QUICListener is a mochi listeners.Listener serving MQTT over QUIC in
// single-stream mode: it accepts QUIC connections, accepts one
// client-opened bidirectional stream per connection and hands the stream,
// wrapped as a net.Conn, to mochi. When the MQTT session ends the connection
// is closed with an application error code (see streamconn) and a reason.
type QUICListener struct {
	cfg ListenerConfig
	log *slog.Logger

	tr     *quic.Transport
	ln     quicAcceptor
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	// valid asks for a Retry when many handshakes from unvalidated
	// addresses are in progress (ListenerConfig.RetryAbove).
	valid *srcvalid.Validator
	// admitted holds the charges of connections admitted once accepted
	// (ListenerConfig.Admit).
	admitted sync.Map // *quic.Conn -> *admission

	// ProtocolErrors counts connections closed for malformed MQTT bytes.
	ProtocolErrors atomic.Int64
	// Accepted counts accepted QUIC connections.
	Accepted atomic.Int64
}

var _ listeners.Listener = (*QUICListener)(nil)

// quicAcceptor is a *quic.Listener, or a *quic.EarlyListener when the
// configuration allows 0-RTT.
type quicAcceptor interface {
	Accept(ctx context.Context) (*quic.Conn, error)
	Addr() net.Addr
	Close() error
}

// NewQUICListener returns a listener; Init opens the socket.
func NewQUICListener(cfg ListenerConfig) *QUICListener {
	if cfg.ID == "" {
		cfg.ID = "mqtt-quic"
	}
	if cfg.Address == "" {
		cfg.Address = ":14567"
	}
	if cfg.StreamTimeout == 0 {
		cfg.StreamTimeout = 10 * time.Second
	}
	if cfg.CloseGrace == 0 {
		cfg.CloseGrace = 2 * time.Second
	}
	if cfg.Tuning == nil {
		cfg.Tuning = quictune.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &QUICListener{cfg: cfg, ctx: ctx, cancel: cancel, valid: srcvalid.New(cfg.RetryAbove),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// ID returns the listener's id.
func (l *QUICListener) ID() string { return l.cfg.ID }

// Address returns the bound UDP address once Init has run.
func (l *QUICListener) Address() string {
	if l.ln != nil {
		return l.ln.Addr().String()
	}
	return l.cfg.Address
}

// Protocol returns "quic".
func (l *QUICListener) Protocol() string { return "quic" }

// Init opens the UDP socket and starts the QUIC listener.
func (l *QUICListener) Init(log *slog.Logger) error {
	if log != nil {
		l.log = log
	}
	if l.cfg.TLS == nil {
		return errors.New("mqtt-quic listener: no TLS configuration")
	}
	tc := l.cfg.TLS.Clone()
	tc.NextProtos = []string{ALPN}
	pc := l.cfg.PacketConn
	if pc == nil {
		addr, err := net.ResolveUDPAddr("udp", l.cfg.Address)
		if err != nil {
			return fmt.Errorf("mqtt-quic listener: bad address %q: %w", l.cfg.Address, err)
		}
		u, err := net.ListenUDP("udp", addr)
		if err != nil {
			return fmt.Errorf("mqtt-quic listener: %w", err)
		}
		pc = u
	}
	// A connection attempt from an address not yet validated counts as
	// half-open until its handshake completes; once RetryAbove of them
	// are, new attempts without a token get a Retry (srcvalid), so that
	// spoofed Initial packets (or replayed 0-RTT flights) from forged
	// addresses cannot reach the per-address bounds (preConnect) without
	// limit.
	l.tr = &quic.Transport{Conn: quicgov.WrapWith(pc, l.cfg.Tuning.ProbeGovernor, quicgov.Options{Logger: l.log, FirstFlightCopies: l.cfg.Tuning.FirstFlightCopies}), StatelessResetKey: l.cfg.StatelessResetKey,
		VerifySourceAddress: l.valid.VerifySourceAddress,
		ConnContext: func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
			if ci.AddrVerified && l.cfg.Admit != nil {
				release, err := l.cfg.Admit(ci.RemoteAddr)
				if err != nil {
					l.log.Debug("mqtt-quic connection refused", "remote", ci.RemoteAddr.String(), "error", err)
					return ctx, err
				}
				ctx = withAdmission(ctx, release)
			}
			return l.valid.Begin(ctx, ci), nil
		}}
	qc := l.cfg.Tuning.QUICConfig()
	qc.Tracer = l.cfg.Tracer
	var ln quicAcceptor
	var err error
	if qc.Allow0RTT {
		// Connections come before their handshake completes, with the
		// client's 0-RTT data (early.go).
		ln, err = l.tr.ListenEarly(tc, qc)
	} else {
		ln, err = l.tr.Listen(tc, qc)
	}
	if err != nil {
		if l.cfg.PacketConn == nil {
			_ = pc.Close()
		}
		return fmt.Errorf("mqtt-quic listener: %w", err)
	}
	l.ln = ln
	return nil
}

// Serve accepts connections until Close, handing each one's MQTT stream to
// establish.
func (l *QUICListener) Serve(establish listeners.EstablishFn) {
	for {
		qc, err := l.ln.Accept(l.ctx)
		if err != nil {
			return
		}
		l.Accepted.Add(1)
		srcvalid.Established(qc)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.handle(qc, establish)
		}()
	}
}

// admissionKey is the context key of a connection's charge to its address
// (ListenerConfig.Admit).
type admissionKey struct{}

// admission is a connection's charge to its address; release frees it
// once.
type admission struct {
	once    sync.Once
	release func()
}

func (a *admission) free() { a.once.Do(a.release) }

// withAdmission returns ctx (a connection's) carrying the charge release
// frees, freed when ctx ends at the latest.
func withAdmission(ctx context.Context, release func()) context.Context {
	a := &admission{release: release}
	context.AfterFunc(ctx, a.free)
	return context.WithValue(ctx, admissionKey{}, a)
}

// errAdmit: the connection's address is at its bound (admit closed it).
var errAdmit = errors.New("mqtt-quic connection refused: its address is at its bound")

// acceptStream waits for qc's MQTT stream, charging qc to its address
// (ListenerConfig.Admit) once its handshake completes if it was not at
// its first packet; a stream that comes first (in 0-RTT data, before the
// handshake completes) is handed on uncharged here, the server counting
// it until CONNECT. A connection refused is closed, with errAdmit.
func (l *QUICListener) acceptStream(ctx context.Context, qc *quic.Conn) (*quic.Stream, error) {
	if l.cfg.Admit == nil {
		return qc.AcceptStream(ctx)
	}
	if _, ok := qc.Context().Value(admissionKey{}).(*admission); ok {
		return qc.AcceptStream(ctx) // charged at its first packet
	}
	select {
	case <-qc.HandshakeComplete():
		if !l.admit(qc) {
			return nil, errAdmit
		}
		return qc.AcceptStream(ctx)
	default:
	}
	// An early connection (0-RTT allowed): its stream may come before
	// its handshake completes.
	type accepted struct {
		s   *quic.Stream
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		s, err := qc.AcceptStream(ctx)
		ch <- accepted{s, err}
	}()
	select {
	case a := <-ch:
		return a.s, a.err
	case <-qc.HandshakeComplete():
		if !l.admit(qc) {
			<-ch // ended by the close
			return nil, errAdmit
		}
		a := <-ch
		return a.s, a.err
	case <-qc.Context().Done():
		a := <-ch
		return a.s, a.err
	}
}

// admit charges qc to its address (ListenerConfig.Admit), closing it
// when its address is at its bound.
func (l *QUICListener) admit(qc *quic.Conn) bool {
	release, err := l.cfg.Admit(qc.RemoteAddr())
	if err != nil {
		l.log.Debug("mqtt-quic connection refused", "remote", qc.RemoteAddr().String(), "error", err)
		_ = qc.CloseWithError(streamconn.CodeRefused, "too many connections without CONNECT from this address")
		return false
	}
	l.admitted.Store(qc, &admission{release: release})
	return true
}

// freeAdmission frees qc's charge to its address: its MQTT stream is
// handed on (the server counts it until CONNECT) or it ends.
func (l *QUICListener) freeAdmission(qc *quic.Conn) {
	if a, ok := qc.Context().Value(admissionKey{}).(*admission); ok {
		a.free()
	}
	if a, ok := l.admitted.LoadAndDelete(qc); ok {
		a.(*admission).free()
	}
}

func (l *QUICListener) handle(qc *quic.Conn, establish listeners.EstablishFn) {
	if l.cfg.OnConn != nil {
		l.cfg.OnConn(1)
		defer l.cfg.OnConn(-1)
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.StreamTimeout)
	s, err := l.acceptStream(ctx, qc)
	cancel()
	l.freeAdmission(qc)
	if errors.Is(err, errAdmit) {
		return // closed by admit
	}
	if err != nil {
		_ = qc.CloseWithError(streamconn.CodeRefused, "no MQTT stream opened")
		return
	}
	nc := streamconn.New(qc, s, false)
	err = establish(l.cfg.ID, nc)
	code, reason, graceful := classify(err)
	if code == streamconn.CodeProtocolError {
		l.ProtocolErrors.Add(1)
	}
	if err != nil && !graceful {
		l.log.Debug("mqtt-quic session ended", "remote", qc.RemoteAddr().String(), "error", err)
	}
	if graceful {
		_ = nc.Finish() // FIN after what mochi wrote last (CONNACK, DISCONNECT)
		// Let the peer read the last packet and close first.
		t := time.NewTimer(l.cfg.CloseGrace)
		select {
		case <-qc.Context().Done():
		case <-t.C:
		case <-l.ctx.Done():
		}
		t.Stop()
	}
	_ = qc.CloseWithError(code, reason)
}

// classify maps the error that ended an MQTT session to the QUIC close code
// and reason; graceful means the broker already told the client (CONNACK or
// DISCONNECT) or the client left, so the connection can drain first.
func classify(err error) (code quic.ApplicationErrorCode, reason string, graceful bool) {
	if err == nil || errors.Is(err, io.EOF) {
		return streamconn.CodeNoError, "", true
	}
	var se *quic.StreamError
	if _, _, ok := streamconn.CloseReason(err); ok || errors.As(err, &se) || errors.Is(err, net.ErrClosed) {
		return streamconn.CodeNoError, "", false // the peer (or shutdown) ended it
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		return streamconn.CodeRefused, "mqtt keep-alive timeout", false
	}
	var pc packets.Code
	if errors.As(err, &pc) {
		switch {
		case pc.Code == packets.CodeSuccess.Code:
			return streamconn.CodeNoError, "", true
		case pc.Code == packets.ErrMalformedPacket.Code || pc.Code == packets.ErrProtocolViolation.Code:
			return streamconn.CodeProtocolError, "malformed mqtt: " + pc.Reason, false
		case pc.Code == packets.ErrPacketTooLarge.Code:
			// An MQTT 5 client was sent DISCONNECT 0x95 (disconnect.go):
			// drain so that it reads it.
			return streamconn.CodeProtocolError, "mqtt packet too large", tooLargeSent(err)
		default:
			return streamconn.CodeRefused, "mqtt: " + pc.Reason, true
		}
	}
	// Decoding errors that are not packet codes (unknown packet type,
	// truncated packet).
	return streamconn.CodeProtocolError, "malformed mqtt: " + err.Error(), false
}

// Close stops accepting, closes the clients of this listener through
// closeClients and waits for their connections to end.
func (l *QUICListener) Close(closeClients listeners.CloseFn) {
	l.once.Do(func() {
		l.cancel()
		closeClients(l.cfg.ID)
		if l.ln != nil {
			_ = l.ln.Close()
		}
		done := make(chan struct{})
		go func() { l.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			l.log.Warn("mqtt-quic listener: connections still open at close")
		}
		if l.tr != nil {
			_ = l.tr.Close()
			if l.cfg.PacketConn == nil {
				_ = l.tr.Conn.Close()
			}
		}
	})
}
