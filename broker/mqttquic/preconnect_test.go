package mqttquic

import (
	"crypto/tls"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// preConnectServer starts a server with MQTT over QUIC, TCP and TLS on
// loopback and the given connect timeout and per-address bound.
func preConnectServer(t *testing.T, timeout time.Duration, perAddr int) (*Server, *testPKI) {
	t.Helper()
	pki := newPKI(t)
	s := startServer(t, pki, func(o *Options) {
		o.TCPAddr = "127.0.0.1:0"
		o.TLSAddr = "127.0.0.1:0"
		o.Limits.ConnectTimeout = timeout
		o.Limits.MaxPreConnectPerAddr = perAddr
	})
	return s, pki
}

// silent opens a connection of transport tr that sends no CONNECT: over
// TCP nothing, over TLS a finished handshake (or nothing at all, "tls-raw"),
// over QUIC the first byte of a CONNECT (a stream reaches the broker with
// its first byte).
func silent(t *testing.T, s *Server, pki *testPKI, tr string) net.Conn {
	t.Helper()
	c, err := silentErr(t, s, pki, tr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// silentErr is silent returning the error of a connection the server
// closed while it was being opened (a refused TLS handshake).
func silentErr(t *testing.T, s *Server, pki *testPKI, tr string) (c net.Conn, err error) {
	t.Helper()
	switch tr {
	case "tcp":
		c, err = net.Dial("tcp", s.TCPAddr())
	case "tls-raw":
		c, err = net.Dial("tcp", s.TLSAddr())
	case "tls":
		var tc *tls.Conn
		if tc, err = tls.Dial("tcp", s.TLSAddr(), &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost"}); err == nil {
			c = tc
		}
	case "quic":
		// A refused connection may be closed before its stream opens (the
		// broker refuses it once the handshake completes).
		if c, err = dialQUICStreamErr(s, pki); err == nil {
			_, err = c.Write([]byte{packets.Connect << 4})
		}
	}
	if c != nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// waitClosed fails unless the server closes c before rawTimeout.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(rawTimeout))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection without CONNECT still open after %v", rawTimeout)
	}
	if err == nil {
		t.Fatal("the server sent something to a connection without CONNECT")
	}
}

// TestConnectTimeout: a connection that sends no CONNECT within
// Limits.ConnectTimeout is closed, on every transport; a client connected
// before keeps its connection (mochi's keepalive deadline replaced the
// CONNECT one) (issue 27 finding 4).
func TestConnectTimeout(t *testing.T) {
	for _, tr := range []string{"tcp", "tls-raw", "tls", "quic"} {
		t.Run(tr, func(t *testing.T) {
			s, pki := preConnectServer(t, 300*time.Millisecond, 0)
			live := dialRaw(t, s.TCPAddr())
			live.connect("live", true, nil)
			waitClosed(t, silent(t, s, pki, tr)) // started after live's CONNECT, so live's first deadline passed too
			live.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}, (*packets.Packet).PingreqEncode)
			live.expect(packets.Pingresp)
			if st := s.Security(); st.ClosedNoConnect != 1 {
				t.Errorf("ClosedNoConnect = %d, want 1", st.ClosedNoConnect)
			}
		})
	}
}

// TestPreConnectPerAddr: one source address holds at most
// Limits.MaxPreConnectPerAddr connections without CONNECT; the next is
// closed at once and counted, and connections that sent CONNECT do not
// count (issue 27 finding 4).
func TestPreConnectPerAddr(t *testing.T) {
	for _, tr := range []string{"tcp", "tls", "quic"} {
		t.Run(tr, func(t *testing.T) {
			s, pki := preConnectServer(t, time.Hour, 2)
			for i := range 3 { // CONNECTed clients release their place
				r := dialRaw(t, s.TCPAddr())
				r.connect("c"+string(rune('a'+i)), true, nil)
			}
			silent(t, s, pki, tr)
			silent(t, s, pki, tr)
			// The server may take the connections in another order than
			// they were opened (QUIC: one goroutine per connection): the
			// third is opened once the first two are counted.
			waitForCond(t, func() bool { return s.compat.pre.held() == 2 }, "two connections without CONNECT counted")
			if c, err := silentErr(t, s, pki, tr); err == nil { // TLS: the handshake fails
				waitClosed(t, c)
			}
			if st := s.Security(); st.RefusedPreConnect != 1 {
				t.Errorf("RefusedPreConnect = %d, want 1", st.RefusedPreConnect)
			}
		})
	}
}

// held is the number of connections waiting for their CONNECT.
func (p *preConnect) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.n {
		n += v
	}
	return n
}

// TestPreConnectHeldAfterConnect bounds what a connection's place among
// those without CONNECT keeps once released (its CONNECT read): the
// connection's tracking holds it for the connection's life. admit made
// three closures and a timer, all kept after release: 247 bytes per
// connection. A pending drops its stopped timer: 75 bytes (docs/BENCH.md,
// "Heap per idle client, site by site"). It also checks that release
// frees the place and stops the deadline.
func TestPreConnectHeldAfterConnect(t *testing.T) {
	const n = 500
	p := newPreConnect(Limits{ConnectTimeout: time.Minute, MaxPreConnectPerAddr: n})
	conns := make([]net.Conn, 0, 2*n)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range n {
		a, b := net.Pipe()
		conns = append(conns, a, b)
	}
	held := make([]*pending, 0, n)
	before := heapAlloc()
	for i := range n {
		w, err := p.admit(conns[2*i])
		if err != nil {
			t.Fatal(err)
		}
		if !w.release() || w.release() {
			t.Fatal("release: want true once, then false")
		}
		held = append(held, w)
	}
	per := (int64(heapAlloc()) - int64(before)) / n
	t.Logf("heap per released connection: %d bytes", per)
	if limit := int64(128); per > limit {
		t.Errorf("heap per released connection %d bytes, want at most %d", per, limit)
	}
	p.mu.Lock()
	left := len(p.n)
	p.mu.Unlock()
	if left != 0 || p.timedOut.Load() != 0 {
		t.Errorf("after release: %d addresses counted, %d timed out; want 0, 0", left, p.timedOut.Load())
	}
	runtime.KeepAlive(held)
}
