package mqttquic

import (
	"crypto/tls"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quiot/quiot/internal/testutil"
)

type testPKI = testutil.PKI

func newPKI(t testing.TB) *testPKI { return testutil.NewPKI(t) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer starts a Server on loopback ports and closes it on cleanup.
func startServer(t testing.TB, p *testPKI, mod func(*Options)) *Server {
	t.Helper()
	o := Options{
		QUICAddr:  "127.0.0.1:0",
		TLS:       &tls.Config{Certificates: []tls.Certificate{p.Server.TLS}},
		ClientCAs: p.Pool(),
		Logger:    discard(),
	}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// udpProxy forwards datagrams between clients and a server address,
// dropping those for which drop returns true (seeded, per direction).
type udpProxy struct {
	conn   *net.UDPConn
	server *net.UDPAddr

	mu      sync.Mutex
	rng     *rand.Rand
	loss    float64 // probability of dropping a datagram
	blocked bool    // drop everything
	clients map[string]*net.UDPConn
	dropped atomic.Int64
	passed  atomic.Int64
}

func newUDPProxy(t testing.TB, server net.Addr, loss float64, seed uint64) *udpProxy {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{conn: c, server: server.(*net.UDPAddr), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), loss: loss, clients: map[string]*net.UDPConn{}}
	go p.run()
	t.Cleanup(func() {
		_ = c.Close()
		p.mu.Lock()
		for _, sc := range p.clients {
			_ = sc.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *udpProxy) addr() *net.UDPAddr { return p.conn.LocalAddr().(*net.UDPAddr) }

func (p *udpProxy) setBlocked(b bool) { p.mu.Lock(); p.blocked = b; p.mu.Unlock() }

func (p *udpProxy) drop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.blocked || p.rng.Float64() < p.loss
	if d {
		p.dropped.Add(1)
	} else {
		p.passed.Add(1)
	}
	return d
}

func (p *udpProxy) run() {
	buf := make([]byte, 65536)
	for {
		n, from, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		sc, ok := p.clients[from.String()]
		if !ok {
			sc, err = net.DialUDP("udp", nil, p.server)
			if err != nil {
				p.mu.Unlock()
				continue
			}
			p.clients[from.String()] = sc
			go p.back(sc, from)
		}
		p.mu.Unlock()
		if !p.drop() {
			_, _ = sc.Write(buf[:n])
		}
	}
}

func (p *udpProxy) back(sc *net.UDPConn, client *net.UDPAddr) {
	buf := make([]byte, 65536)
	for {
		n, err := sc.Read(buf)
		if err != nil {
			return
		}
		if !p.drop() {
			_, _ = p.conn.WriteToUDP(buf[:n], client)
		}
	}
}
