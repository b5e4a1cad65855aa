package mqttquic

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/listeners"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/web"
)

// MQTT over WebSocket (ws://HOST/mqtt, wss://HOST/mqtt; docs/mqtt.md,
// docs/browser.md): how browser apps (MQTT.js, Paho JavaScript) speak MQTT.
// Each WebSocket connection is handed to the same mochi server as MQTT over
// QUIC, TCP and TLS, so it goes through the same authentication hook, ACL,
// per-identity and per-address session limits and Maximum Packet Size.
//
// mochi ships a WebSocket listener (listeners.Websocket); it is not used
// because it accepts every Origin (any web page a user visits could use
// the broker with the user's network position), offers no hook to refuse
// one before the upgrade, buffers a WebSocket message of any size before
// mochi sees a byte of it, accepts text frames until it reads them, and
// binds only when it starts serving (so ":0" has no address to report).

const (
	// WSPath is the HTTP path MQTT over WebSocket is served at (MQTT.js,
	// Paho and mosquitto use /mqtt).
	WSPath = "/mqtt"
	// wsCloseWait bounds the write of a WebSocket close frame.
	wsCloseWait = time.Second
	// wsHandshakeTimeout bounds the TLS handshake and the upgrade request.
	wsHandshakeTimeout = 10 * time.Second
	// wsMaxHeaderBytes bounds the upgrade request's headers.
	wsMaxHeaderBytes = 16 << 10
)

// wsSubprotocols are the WebSocket subprotocols served, in order of
// preference: "mqtt" (MQTT 3.1.1 and 5.0) and "mqttv3.1" (older Paho
// JavaScript clients). A client must offer one of them (MQTT-6.0.0-3).
var wsSubprotocols = []string{"mqtt", "mqttv3.1"}

// errTextFrame ends a connection whose client sent a text frame.
var errTextFrame = errors.New("mqtt over websocket: text frame (MQTT travels in binary frames only)")

// wsListener is a mochi listeners.Listener serving MQTT over WebSocket at
// WSPath, plain or with TLS, on its own socket or, mounted, as the handler
// of another HTTP server (the broker's port, Options.WSOnBroker).
type wsListener struct {
	id      string
	addr    string
	tls     *tls.Config // nil: plain ws://
	mounted bool        // no socket: another server calls ServeHTTP
	ready   chan struct{}
	origin  func(string) bool
	limit   int64         // largest WebSocket message read (the Maximum Packet Size)
	connect time.Duration // bound on the wait for CONNECT after the upgrade
	core    Core          // counts refusals; may be nil
	log     *slog.Logger

	ln        net.Listener
	srv       *http.Server
	up        websocket.Upgrader
	establish listeners.EstablishFn

	mu    sync.Mutex
	conns map[*wsConn]struct{} // upgraded connections, closed by Close
}

var _ listeners.Listener = (*wsListener)(nil)

// newWSListener makes a listener on addr; tc nil means plain WebSocket.
// origins is the --cors-origins list (broker/web's check, the one the
// HTTP side applies).
func newWSListener(id, addr string, tc *tls.Config, origins []string, maxPacket uint32, connect time.Duration, core Core, log *slog.Logger) (*wsListener, error) {
	allows, err := web.OriginCheck(origins)
	if err != nil {
		return nil, fmt.Errorf("mqtt server: %s listener: %w", id, err)
	}
	if connect <= 0 {
		connect = wsHandshakeTimeout
	}
	l := &wsListener{id: id, addr: addr, tls: tc, origin: allows, limit: int64(maxPacket), connect: connect, core: core, log: log,
		ready: make(chan struct{}), conns: map[*wsConn]struct{}{}}
	l.up = websocket.Upgrader{
		HandshakeTimeout: wsHandshakeTimeout,
		Subprotocols:     wsSubprotocols,
		// ServeHTTP checked the Origin before the upgrade.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	return l, nil
}

// ID returns the listener's id in mochi.
func (l *wsListener) ID() string { return l.id }

// Address returns the bound address once Init ran, else the configured one
// ("" when mounted).
func (l *wsListener) Address() string {
	if l.ln != nil {
		return l.ln.Addr().String()
	}
	return l.addr
}

// Protocol returns "ws" or "wss".
func (l *wsListener) Protocol() string {
	if l.tls != nil || l.mounted {
		return "wss"
	}
	return "ws"
}

// Init binds the socket (mochi calls it from AddListener); a mounted
// listener has none.
func (l *wsListener) Init(*slog.Logger) error {
	if l.mounted {
		return nil
	}
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", l.id, err)
	}
	if l.tls != nil {
		ln = tls.NewListener(ln, l.tls)
	}
	l.ln = ln
	l.srv = &http.Server{
		Handler:           l,
		ReadHeaderTimeout: wsHandshakeTimeout,
		MaxHeaderBytes:    wsMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(l.log.Handler(), slog.LevelDebug),
	}
	return nil
}

// Serve serves upgrade requests until Close (a mounted listener returns
// at once: the other server calls ServeHTTP from now on).
func (l *wsListener) Serve(establish listeners.EstablishFn) {
	if testHookWSServe != nil {
		testHookWSServe()
	}
	l.establish = establish
	close(l.ready)
	if l.mounted {
		return
	}
	if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		l.log.Error("mqtt websocket listener failed", "listener", l.id, "error", err)
	}
}

// Close stops accepting, closes the upgraded connections and has mochi
// close its clients of this listener.
func (l *wsListener) Close(closeClients listeners.CloseFn) {
	if l.srv != nil {
		_ = l.srv.Close()
	}
	l.mu.Lock()
	conns := l.conns
	l.conns = nil // later upgrades are closed at once (track)
	l.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	closeClients(l.id)
}

// ServeHTTP checks the request and upgrades it: the path, the Origin
// (before the upgrade, so a refused page gets 403 with the reason), the
// subprotocol; then the connection is mochi's until the session ends.
func (l *wsListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != WSPath {
		http.Error(w, fmt.Sprintf("not found: MQTT over WebSocket is served at %s", WSPath), http.StatusNotFound)
		return
	}
	// A browser always sends Origin; other clients (MQTT.js in Node,
	// command-line tools) usually send none and are judged by CONNECT
	// like every MQTT client. On the broker's own port a page the broker
	// served (the dashboard) is of its origin.
	if origin := r.Header.Get("Origin"); origin != "" && !l.origin(origin) && !(l.mounted && web.SameOrigin(origin, r)) {
		if l.core != nil {
			countRefused(l.core, broker.ReasonForbidden)
		}
		l.log.Info("mqtt websocket refused: origin not allowed", "listener", l.id, "origin", origin, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("forbidden: origin %q is not allowed (broker --cors-origins)", origin), http.StatusForbidden)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		http.Error(w, "bad request: MQTT over WebSocket needs a WebSocket upgrade (subprotocol mqtt)", http.StatusBadRequest)
		return
	}
	if !offersSubprotocol(r) {
		http.Error(w, `bad request: offer the WebSocket subprotocol "mqtt" (or "mqttv3.1")`, http.StatusBadRequest)
		return
	}
	select {
	case <-l.ready:
	default:
		http.Error(w, "service unavailable: the MQTT server is starting", http.StatusServiceUnavailable)
		return
	}
	if testHookWSAuthenticated != nil {
		testHookWSAuthenticated()
	}
	// The identity and the ACL generation it holds from are taken before
	// the upgrade is answered: a client that reloads the ACL as soon as
	// it has its 101 must not find its connection judged after the reload.
	var sess *wsSession
	if l.core != nil {
		sess = sessionOf(r, l.core.Auth()) // ws_session.go
	}
	c, err := l.up.Upgrade(w, r, nil) // answers a bad upgrade itself
	if err != nil {
		l.log.Debug("mqtt websocket upgrade failed", "listener", l.id, "remote", r.RemoteAddr, "error", err)
		return
	}
	// A server that hands over its connection may leave its request
	// deadlines on it. The CONNECT is due within l.connect (mochi waits
	// for it without a bound); after it mochi sets its own deadlines
	// (keep-alive).
	_ = c.NetConn().SetDeadline(time.Time{})
	_ = c.SetReadDeadline(time.Now().Add(l.connect))
	// A message larger than an MQTT packet may be is refused (close
	// 1009) from its frame header, never read into memory.
	c.SetReadLimit(l.limit)
	wc := &wsConn{c: c, size: sizeWatch{max: uint32(l.limit)}, sess: sess}
	var nc net.Conn = wc
	if r.TLS != nil {
		nc = &wssConn{wsConn: wc, cs: *r.TLS}
	}
	if !l.track(wc) {
		_ = wc.Close()
		return
	}
	// The connection is mochi's until the session ends; the HTTP
	// handler returns (a server that waits for its handlers on shutdown
	// does not wait for MQTT sessions).
	remote := r.RemoteAddr
	go func() {
		defer l.untrack(wc)
		err := l.establish(l.id, nc)
		_ = wc.Close()
		l.log.Debug("mqtt websocket session ended", "listener", l.id, "remote", remote, "error", err)
	}()
}

// testHookWSAuthenticated, set by tests only, runs once the broker's
// browser part has judged an upgrade request's session token, before the
// listener binds it to the connection.
var testHookWSAuthenticated func()

// testHookWSServe, set by tests only, runs when mochi starts a WebSocket
// listener's Serve, before it serves.
var testHookWSServe func()

func (l *wsListener) track(c *wsConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *wsListener) untrack(c *wsConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns != nil {
		delete(l.conns, c)
	}
}

// offersSubprotocol reports whether the upgrade request offers one of
// wsSubprotocols.
func offersSubprotocol(r *http.Request) bool {
	for _, p := range websocket.Subprotocols(r) {
		for _, s := range wsSubprotocols {
			if p == s {
				return true
			}
		}
	}
	return false
}

// wsConn is a WebSocket connection as the net.Conn mochi reads MQTT from:
// the payloads of binary messages, in order, as one byte stream (an MQTT
// packet may span messages and a message may hold several packets,
// MQTT-6.0.0-2); each Write is one binary message. A text message ends
// the connection (close 1003 with the reason).
type wsConn struct {
	c *websocket.Conn
	r io.Reader // the current message, or nil
	// sess is the identity the upgrade request authenticated (a browser
	// session token, HTTP credentials; ws_session.go), or nil.
	sess *wsSession
	// size follows the MQTT packets for one larger than the Maximum
	// Packet Size announced in messages that are not (disconnect.go).
	size sizeWatch

	wmu       sync.Mutex   // one writer at a time (gorilla allows one)
	wdl       atomic.Int64 // write deadline (Unix ns; 0: none), set on the Conn under wmu
	closeOnce sync.Once
}

// Read reads message payloads as one stream.
func (ws *wsConn) Read(p []byte) (int, error) {
	for {
		if ws.r == nil {
			op, r, err := ws.c.NextReader()
			if err != nil {
				return 0, ws.readFailed(err)
			}
			if op != websocket.BinaryMessage {
				_ = ws.closeWith(websocket.CloseUnsupportedData, "MQTT over WebSocket takes binary frames only")
				return 0, errTextFrame
			}
			ws.r = r
		}
		n, err := ws.r.Read(p)
		if n, err2 := ws.size.refuse(p, n, nil, ws.Write); err2 != nil {
			return n, err2
		}
		if errors.Is(err, io.EOF) {
			ws.r = nil
			if n == 0 {
				continue // an empty message, or the end of one
			}
			return n, nil
		}
		if err != nil {
			return n, ws.readFailed(err)
		}
		return n, nil
	}
}

// readFailed closes the connection for a failed read and says why. A read
// past its deadline (no CONNECT in time after the upgrade, or nothing
// within 1.5 keep-alive periods) is closed with 1008 and the reason;
// otherwise gorilla has answered (a close, a protocol error, an
// oversized message) with its own close frame, or the connection is
// gone, and Close sends none.
func (ws *wsConn) readFailed(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		_ = ws.closeWith(websocket.ClosePolicyViolation, "no MQTT packet in time (CONNECT after the upgrade, or within 1.5 keep-alive periods)")
		return fmt.Errorf("mqtt over websocket: %w", err)
	}
	ws.closeOnce.Do(func() {})
	return wsReadError(err)
}

// wsReadError names what ended a WebSocket read: a close from the client
// is the end of the stream.
func wsReadError(err error) error {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce):
		return io.EOF
	case errors.Is(err, websocket.ErrReadLimit):
		return fmt.Errorf("mqtt over websocket: message larger than the maximum packet size (closed with 1009): %w", err)
	}
	return err
}

// Write sends p as one binary message.
func (ws *wsConn) Write(p []byte) (int, error) {
	ws.wmu.Lock()
	defer ws.wmu.Unlock()
	var dl time.Time
	if ns := ws.wdl.Load(); ns != 0 {
		dl = time.Unix(0, ns)
	}
	_ = ws.c.SetWriteDeadline(dl)
	if err := ws.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// closeWith sends a close frame with code and reason (once; later calls
// send nothing).
func (ws *wsConn) closeWith(code int, reason string) error {
	var err error
	ws.closeOnce.Do(func() {
		err = ws.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(wsCloseWait))
	})
	return err
}

// Close sends a normal close frame (unless one was sent) and closes the
// TCP connection.
func (ws *wsConn) Close() error {
	_ = ws.closeWith(websocket.CloseNormalClosure, "")
	return ws.c.Close()
}

// LocalAddr returns the local TCP address.
func (ws *wsConn) LocalAddr() net.Addr { return ws.c.LocalAddr() }

// RemoteAddr returns the client's TCP address (what per-address limits
// and the loopback-only default judge).
func (ws *wsConn) RemoteAddr() net.Addr { return ws.c.RemoteAddr() }

// SetDeadline sets the read and write deadlines. mochi calls it from the
// reading goroutine (keep-alive) while another one writes.
func (ws *wsConn) SetDeadline(t time.Time) error {
	if err := ws.c.SetReadDeadline(t); err != nil {
		return err
	}
	return ws.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline (of the TCP connection, safe
// beside a write).
func (ws *wsConn) SetReadDeadline(t time.Time) error { return ws.c.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline of later writes. gorilla's own
// SetWriteDeadline may not run beside a write (found by -race: mochi
// refreshes deadlines while its write loop writes), so the deadline is
// kept here and set on the connection by Write, under its lock.
func (ws *wsConn) SetWriteDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	ws.wdl.Store(ns)
	return nil
}

// wssConn is a wsConn over TLS: its ConnectionState gives the auth hook a
// verified client certificate, as on MQTT over TLS and QUIC.
type wssConn struct {
	*wsConn
	cs tls.ConnectionState
}

// ConnectionState returns the TLS state of the upgraded connection.
func (c *wssConn) ConnectionState() tls.ConnectionState { return c.cs }

// startWS adds the MQTT over WebSocket listeners (Options.WSAddr,
// Options.WSSAddr).
func (s *Server) startWS() error {
	for _, ws := range []struct {
		id, addr string
		secure   bool
		dst      **wsListener
	}{
		{"mqtt-ws", s.opts.WSAddr, false, &s.ws},
		{"mqtt-wss", s.opts.WSSAddr, true, &s.wss},
	} {
		if ws.addr == "" {
			continue
		}
		var tc *tls.Config
		if ws.secure {
			tc = s.serverTLS() // TLS 1.3 only, as MQTT over TLS (tls.go)
		}
		l, err := newWSListener(ws.id, ws.addr, tc, s.opts.CORSOrigins, s.opts.MaxPacketSize, s.opts.StreamTimeout, s.opts.Broker, s.opts.Logger)
		if err != nil {
			return err
		}
		if err := s.mq.AddListener(sessionEnds{l, s.compat}); err != nil {
			return fmt.Errorf("mqtt server: %s listener: %w", ws.id, err)
		}
		*ws.dst = l
		s.wsAll = append(s.wsAll, l)
	}
	if s.opts.WSOnBroker {
		m, ok := s.opts.Broker.(wsMounter)
		if !ok {
			return errors.New("mqtt server: MQTT over WebSocket on the broker's port needs a broker (Options.Broker) that serves it")
		}
		l, err := newWSListener("mqtt-ws-broker", "", nil, s.opts.CORSOrigins, s.opts.MaxPacketSize, s.opts.StreamTimeout, s.opts.Broker, s.opts.Logger)
		if err != nil {
			return err
		}
		l.mounted = true
		if err := s.mq.AddListener(sessionEnds{l, s.compat}); err != nil {
			return fmt.Errorf("mqtt server: %s listener: %w", l.id, err)
		}
		m.SetMQTTWebSocket(l)
		s.mounted = m
		s.wsAll = append(s.wsAll, l)
	}
	if s.ws != nil && !IsLoopbackAddr(s.ws.Address()) {
		s.opts.Logger.Warn("plain MQTT over WebSocket listens on a non-loopback address: passwords and messages cross the network in clear; use --mqtt-wss, or listen on 127.0.0.1", "address", s.ws.Address())
	}
	return nil
}

// wsMounter is a broker that serves MQTT over WebSocket on its own port
// (broker.Broker.SetMQTTWebSocket).
type wsMounter interface {
	SetMQTTWebSocket(h http.Handler)
}

// WSAddr returns the bound address of the MQTT over WebSocket listener,
// or "".
func (s *Server) WSAddr() string {
	if s.ws == nil {
		return ""
	}
	return s.ws.Address()
}

// WSSAddr returns the bound address of the MQTT over secure WebSocket
// listener, or "".
func (s *Server) WSSAddr() string {
	if s.wss == nil {
		return ""
	}
	return s.wss.Address()
}
