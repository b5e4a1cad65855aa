package mqttquic

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/streamconn"
)

// QUIC version 1 long header packet types (RFC 9000 section 17.2).
const (
	packetInitial = 0
	packetRetry   = 3
)

// deafConn is a UDP socket whose QUIC transport never receives anything:
// a client whose packets carry a source address it does not own (a
// spoofer never sees the server's answers). The long header packet types
// the server sent it go to got (the first byte of the first one tells an
// answer from a Retry).
type deafConn struct {
	net.PacketConn
	got chan int
}

func newDeafConn(t *testing.T, ip string) *deafConn {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Skipf("cannot bind %s: %v", ip, err)
	}
	return &deafConn{PacketConn: udp, got: make(chan int, 64)}
}

func (c *deafConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, _, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return 0, nil, err
		}
		if n > 0 && b[0]&0x80 != 0 {
			select {
			case c.got <- int(b[0]&0x30) >> 4:
			default:
			}
		}
	}
}

// firstAnswer waits for the type of the first long header packet the
// server sent to c.
func (c *deafConn) firstAnswer(t *testing.T, what string) int {
	t.Helper()
	select {
	case typ := <-c.got:
		return typ
	case <-time.After(30 * time.Second): // only catches a hang
		t.Fatalf("%s: no answer from the server", what)
	}
	return -1
}

// keptSessions is a TLS client session cache that keeps each ticket for
// every later connection (crypto/tls may drop one once used): each
// spoofed attempt sends 0-RTT data with it. ticket is closed at the first
// ticket stored.
type keptSessions struct {
	mu     sync.Mutex
	m      map[string]*tls.ClientSessionState
	once   sync.Once
	ticket chan struct{}
}

func (k *keptSessions) Get(key string) (*tls.ClientSessionState, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.m[key]
	return s, ok
}

func (k *keptSessions) Put(key string, cs *tls.ClientSessionState) {
	if cs == nil {
		return
	}
	k.mu.Lock()
	k.m[key] = cs
	k.mu.Unlock()
	k.once.Do(func() { close(k.ticket) })
}

// TestQUICRetryBeforePerAddressLimits is issue 27 finding 10 on the
// MQTT-over-QUIC listener (broker's test of the same name for HTTP/3):
// once Limits.QUICRetryAbove handshakes from unvalidated addresses are
// in progress, a new connection attempt must first prove its source
// address (a Retry). With a threshold of 1, a first spoofed attempt from
// 127.0.0.2 (it never answers) is served, a second one gets a Retry, and
// a real client of 127.0.0.2 still connects (through a Retry). With 0-RTT
// a spoofed attempt reaches the per-address bound before its handshake
// (its stream, opened in 0-RTT data, is charged to
// Limits.MaxPreConnectPerAddr, 2 here): without the validation both
// spoofed attempts took the address's 2 places and the real client was
// closed at once; with it the second one is never charged.
func TestQUICRetryBeforePerAddressLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool
	}{
		{"1-RTT", false},
		{"0-RTT", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retryBeforePerAddressLimits(t, tc.early)
		})
	}
}

func retryBeforePerAddressLimits(t *testing.T, early bool) {
	pki := newPKI(t)
	pr := quictune.Lean()
	pr.Allow0RTT = early
	pr.HandshakeIdleTimeout = quictune.Duration(2 * time.Minute) // the spoofed handshakes stay half-open
	s := startServer(t, pki, func(o *Options) {
		o.Tuning = pr
		o.ClientCAs = nil // no client certificate requested: a 0-RTT CONNECT is read at once
		o.Limits.MaxPreConnectPerAddr = 2
		o.Limits.ConnectTimeout = time.Hour
		o.Limits.QUICRetryAbove = 1
	})
	server := s.QUICAddr()
	tlsConf := func() *tls.Config {
		return &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost", NextProtos: []string{ALPN}}
	}
	sessions := &keptSessions{m: map[string]*tls.ClientSessionState{}, ticket: make(chan struct{})}
	if early {
		// A session ticket, from a client of 127.0.0.1 (an attacker's own
		// address): the spoofed attempts send 0-RTT data with it.
		tc := tlsConf()
		tc.ClientSessionCache = sessions
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
		qc, err := quic.DialAddr(ctx, server.String(), tc, &quic.Config{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-sessions.ticket:
		case <-time.After(30 * time.Second):
			t.Fatal("no session ticket")
		}
		_ = qc.CloseWithError(0, "")
		// Its handshake is no longer counted as half-open (the listener
		// sees it complete on a goroutine of its own).
		waitForCond(t, func() bool { return s.Security().QUICHalfOpen == 0 }, "the ticket's handshake counted complete")
	}

	const victim = "127.0.0.2"
	ctx, cancel := context.WithCancel(context.Background())
	var dials sync.WaitGroup
	// spoof sends a connection attempt from victim that never hears the
	// server: with 0-RTT its stream and the first byte of a CONNECT go in
	// 0-RTT data.
	spoof := func() *deafConn {
		deaf := newDeafConn(t, victim)
		tr := &quic.Transport{Conn: deaf}
		t.Cleanup(func() {
			cancel() // the attempts close their connections (a 0-RTT one was accepted)
			dials.Wait()
			_ = deaf.Close() // before the transport: its reader waits on it
			_ = tr.Close()
		})
		dials.Add(1)
		go func() {
			defer dials.Done()
			tc := tlsConf()
			tc.ClientSessionCache = sessions
			qc, err := tr.DialEarly(ctx, server, tc, &quic.Config{HandshakeIdleTimeout: 2 * time.Minute})
			if err != nil {
				return
			}
			defer func() { _ = qc.CloseWithError(0, "") }()
			if early {
				st, err := qc.OpenStream()
				if err != nil {
					return
				}
				_, _ = st.Write([]byte{packets.Connect << 4})
			}
			<-ctx.Done()
		}()
		return deaf
	}

	first := spoof()
	if typ := first.firstAnswer(t, "first spoofed attempt"); typ != packetInitial {
		t.Fatalf("first spoofed attempt: the server answered with packet type %d, want its Initial", typ)
	}
	if early {
		waitForCond(t, func() bool { return s.compat.pre.held() == 1 }, "the first spoofed attempt's 0-RTT stream charged to its address")
	}
	second := spoof()
	if typ := second.firstAnswer(t, "second spoofed attempt"); typ != packetRetry {
		t.Errorf("second spoofed attempt: the server answered with packet type %d, want a Retry (%d)", typ, packetRetry)
	}

	// A real client of the victim's address.
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(victim)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() {
		_ = tr.Close()
		_ = udp.Close()
	})
	dctx, dcancel := context.WithTimeout(context.Background(), rawTimeout)
	defer dcancel()
	qc, err := tr.Dial(dctx, server, tlsConf(), &quic.Config{})
	if err != nil {
		t.Fatalf("real client of %s beside the spoofed attempts: %v", victim, err)
	}
	st, err := qc.OpenStreamSync(dctx)
	if err != nil {
		t.Fatal(err)
	}
	nc := streamconn.New(qc, st, true)
	t.Cleanup(func() { _ = nc.Close() })
	if _, code := connectOn(t, nc, connectOpts{id: "real", clean: true}); code != 0 {
		t.Fatalf("real client of %s: CONNACK 0x%02x", victim, code)
	}
	sec := s.Security()
	if sec.RefusedPreConnect != 0 {
		t.Errorf("RefusedPreConnect = %d, want 0", sec.RefusedPreConnect)
	}
	if sec.QUICRetries < 2 {
		t.Errorf("QUICRetries = %d: the second spoofed attempt and the real client came through a Retry", sec.QUICRetries)
	}
	if sec.QUICHalfOpen != 1 {
		t.Errorf("QUICHalfOpen = %d, want 1 (the first spoofed attempt)", sec.QUICHalfOpen)
	}
	var m strings.Builder
	s.WritePrometheus(&m)
	for _, want := range []string{"\nquiot_mqtt_quic_half_open 1\n", "# TYPE quiot_mqtt_quic_retries_total counter\n"} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestEarlyWakeUpThroughRetry: with every new connection asked for a
// Retry (Limits.QUICRetryAbove -1, as under load), a resumed client's
// wake-up still goes in 0-RTT data: its CONNECT and PUBLISH, dropped with
// the first Initial, are sent again after the Retry (one more round trip)
// and delivered once.
func TestEarlyWakeUpThroughRetry(t *testing.T) {
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool(), Logger: discard()})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.Tuning = early0RTTProfile()
		o.ClientCAs = nil
		o.Limits.QUICRetryAbove = -1
	})
	sub := mustConnect(t, s, p, "quic", connectOpts{id: "retry-sub"})
	if codes := sub.subscribe("wake/#"); codes[0] > 1 {
		t.Fatalf("subscribe: 0x%02x", codes[0])
	}
	cache := tls.NewLRUClientSessionCache(4)
	for i := range 2 {
		c, err := client.New(client.Options{Broker: quicURL(s), RootCAs: p.Pool(), Logger: discard(),
			Tuning: earlyClientProfile(), SessionCache: cache, ClientID: "retry-dev"})
		if err != nil {
			t.Fatal(err)
		}
		payload := fmt.Sprintf("wake %d", i)
		if _, err := c.Publish(context.Background(), "wake/up", []byte(payload), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatalf("wake-up %d: %v", i, err)
		}
		used := client.Used0RTT(c)
		_ = c.Close()
		if pk := sub.next(); string(pk.Payload) != payload {
			t.Fatalf("wake-up %d: delivered %q", i, pk.Payload)
		}
		if used != (i == 1) {
			t.Errorf("wake-up %d: 0-RTT used %v, want %v (a session ticket from the first)", i, used, i == 1)
		}
	}
	sub.expectNoPublish("retry-sub", "after the wake-ups")
	if st := s.Security(); st.QUICRetries < 3 {
		t.Errorf("QUICRetries = %d, want one per connection (3)", st.QUICRetries)
	}
}
