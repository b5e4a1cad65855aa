// Package testutil holds helpers for tests across quiot: an in-memory CA with
// server and client certificates, a readiness wait and HTTP/3 clients for a
// broker, and a byte-counting net.PacketConn. It imports nothing of broker/
// or device/ (internal/ is the ground floor); broker/brokertest starts an
// HTTP/3 broker for a test and broker/mqttquic/mqtttest an MQTT one.
package testutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/sockbuf"
)

// PKI is an in-memory CA with a server certificate for localhost/127.0.0.1.
type PKI struct {
	CA     *certs.CA
	Server *certs.Issued
}

// NewPKI makes a CA and a server certificate.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	ca, err := certs.NewCA("quiot test CA", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue("localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &PKI{CA: ca, Server: srv}
}

// Client issues a client certificate with CN name.
func (p *PKI) Client(t testing.TB, name string) tls.Certificate {
	t.Helper()
	c, err := p.CA.Issue(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.TLS
}

// Pool is a pool holding the CA certificate.
func (p *PKI) Pool() *x509.CertPool { return p.CA.Pool() }

// CAFile writes the CA certificate (PEM) to a file of t's temporary
// directory and returns its path: what --ca and ca_file take.
func (p *PKI) CAFile(t testing.TB) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, p.CA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// DiscardLogger is a logger that writes nowhere.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// WaitReady polls GET /healthz over HTTP/3 until it answers 200 (10 s at most).
func WaitReady(t testing.TB, url string, pool *x509.CertPool) {
	t.Helper()
	c := H3Client(pool, nil)
	defer c.Transport.(*http3.Transport).Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker at %s not ready: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a readiness wait, not a synchronisation
	}
}

// H3Client returns an HTTP/3 client trusting pool, presenting cert when
// non-nil. Close its transport with client.Transport.(*http3.Transport).Close().
func H3Client(pool *x509.CertPool, cert *tls.Certificate) *http.Client {
	return H3ClientConn(pool, cert, nil)
}

// H3ClientConn is H3Client whose QUIC connections run on pc (e.g. a
// CountingConn) when pc is non-nil; the caller closes pc.
func H3ClientConn(pool *x509.CertPool, cert *tls.Certificate, pc net.PacketConn) *http.Client {
	return H3ClientQUIC(pool, cert, pc, nil)
}

// H3ClientQUIC is H3ClientConn with a QUIC configuration (nil: a 30 s idle
// timeout, otherwise quic-go's defaults), e.g. small flow-control windows to
// make a slow reader.
func H3ClientQUIC(pool *x509.CertPool, cert *tls.Certificate, pc net.PacketConn, qc *quic.Config) *http.Client {
	tc := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	if qc == nil {
		qc = &quic.Config{MaxIdleTimeout: 30 * time.Second}
	}
	tr := &http3.Transport{TLSClientConfig: tc, QUICConfig: qc}
	if pc != nil {
		qt := &quic.Transport{Conn: pc}
		tr.Dial = func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			ua, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return qt.DialEarly(ctx, ua, tlsCfg, cfg)
		}
	}
	return &http.Client{Transport: tr}
}

// CountingConn wraps a net.PacketConn and counts datagrams and bytes in
// both directions.
type CountingConn struct {
	sockbuf.Conn              // passes quic-go's buffer sizing through
	BytesIn, BytesOut         atomic.Uint64
	DatagramsIn, DatagramsOut atomic.Uint64
}

// NewCountingConn wraps pc.
func NewCountingConn(pc net.PacketConn) *CountingConn { return &CountingConn{Conn: sockbuf.Wrap(pc)} }

// ListenCounting opens a UDP socket on 127.0.0.1:0 wrapped in a CountingConn.
func ListenCounting(t testing.TB) *CountingConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return NewCountingConn(pc)
}

// ReadFrom counts a received datagram.
func (c *CountingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if n > 0 || err == nil {
		c.BytesIn.Add(uint64(n))
		c.DatagramsIn.Add(1)
	}
	return n, addr, err
}

// WriteTo counts a sent datagram.
func (c *CountingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, addr)
	if err == nil {
		c.BytesOut.Add(uint64(n))
		c.DatagramsOut.Add(1)
	}
	return n, err
}

// Total returns bytes and datagrams, both directions summed.
func (c *CountingConn) Total() (bytes, datagrams uint64) {
	return c.BytesIn.Load() + c.BytesOut.Load(), c.DatagramsIn.Load() + c.DatagramsOut.Load()
}

// Reset zeroes the counters.
func (c *CountingConn) Reset() {
	c.BytesIn.Store(0)
	c.BytesOut.Store(0)
	c.DatagramsIn.Store(0)
	c.DatagramsOut.Store(0)
}

// TicketSignal is a TLS client session cache that reports on Stored each
// session ticket it stores: a test that resumes a session waits for it
// after its first connection.
type TicketSignal struct {
	tls.ClientSessionCache
	// Stored receives a value (without blocking Put: one is kept) when a
	// ticket is stored.
	Stored chan struct{}
}

// NewTicketSignal returns a TicketSignal over an LRU cache of n sessions.
func NewTicketSignal(n int) TicketSignal {
	return TicketSignal{tls.NewLRUClientSessionCache(n), make(chan struct{}, 1)}
}

// Put stores cs under key and reports a ticket on Stored.
func (s TicketSignal) Put(key string, cs *tls.ClientSessionState) {
	s.ClientSessionCache.Put(key, cs)
	if cs != nil {
		select {
		case s.Stored <- struct{}{}:
		default:
		}
	}
}

// QUICExchange dials addr over tr (connection i of a test), sends request
// on a stream (in 0-RTT data when the dial can), closes its side and
// fails the test unless the peer answers with the request's length in
// decimal, as the echo-length servers of the QUIC socket wrappers' tests
// do. It returns the connection, open.
func QUICExchange(ctx context.Context, t testing.TB, tr *quic.Transport, addr net.Addr, ctls *tls.Config, conf *quic.Config, request []byte, i int) *quic.Conn {
	t.Helper()
	c, err := tr.DialEarly(ctx, addr, ctls, conf)
	if err != nil {
		t.Fatalf("connection %d: %v", i, err)
	}
	s, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(request); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	answer, err := io.ReadAll(s)
	if err != nil || string(answer) != strconv.Itoa(len(request)) {
		t.Fatalf("connection %d: answer %q, %v", i, answer, err)
	}
	return c
}
