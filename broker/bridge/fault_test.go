package bridge_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/testutil"
)

// proxy is a TCP relay between the bridge and the upstream that can
// swallow what the bridge sends (a link that loses everything one way) and
// cut every connection.
type proxy struct {
	l       net.Listener
	target  string
	swallow atomic.Bool
	eaten   atomic.Int64 // bytes swallowed
	// eatenPubs counts the PUBLISH packets whose last byte was swallowed.
	eatenPubs atomic.Int64
	ate       chan struct{} // signalled after each swallowed read
	mu        sync.Mutex
	conns     []net.Conn
}

// mqttFramer follows the MQTT packets of one direction of a connection.
type mqttFramer struct {
	buf []byte
}

// feed adds b and returns the types of the packets it completed.
func (f *mqttFramer) feed(b []byte) []byte {
	f.buf = append(f.buf, b...)
	var types []byte
	for {
		// Fixed header: type and flags, then the remaining length (a
		// variable byte integer of up to 4 bytes).
		n, mul, i := 0, 1, 1
		for ; i < len(f.buf) && i <= 4; i++ {
			n += int(f.buf[i]&0x7f) * mul
			mul *= 128
			if f.buf[i]&0x80 == 0 {
				break
			}
		}
		if i >= len(f.buf) || len(f.buf) < i+1+n {
			return types
		}
		types = append(types, f.buf[0]>>4)
		f.buf = f.buf[i+1+n:]
	}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, ate: make(chan struct{}, 1)}
	t.Cleanup(func() { _ = l.Close(); p.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				var fr mqttFramer
				for {
					n, err := c.Read(buf)
					if n > 0 {
						types := fr.feed(buf[:n])
						if p.swallow.Load() {
							p.eaten.Add(int64(n))
							for _, ty := range types {
								if ty == 3 {
									p.eatenPubs.Add(1)
								}
							}
							select {
							case p.ate <- struct{}{}:
							default:
							}
						} else if _, werr := u.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_ = u.Close()
			}()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// cut closes every relayed connection.
func (p *proxy) cut() {
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

// TestPublishCutIsSentAgain: a QoS 1 publish the upstream never received
// (the link swallowed it) and whose connection then broke is sent again
// on the next connection: it is not lost.
func TestPublishCutIsSentAgain(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquitto(t, pki, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := mq.sub(ctx, t, "site-1/#")
	px := startProxy(t, "127.0.0.1:"+mq.port)
	cfg := config(t, fmt.Sprintf(`
[[bridge]]
name          = "cloud"
url           = "mqtt://%s"
out           = ["sensors/#"]
remote_prefix = "site-1/"
username      = %q
password      = %q
reconnect_min = "50ms"
reconnect_max = "200ms"
`, px.addr(), upUser, upPass))
	br := startBridge(t, edge.Broker, cfg)
	publish(ctx, t, edge.Broker, "sensors/a", "before", false)
	if l := up.next(ctx, t, "before"); l != "site-1/sensors/a before" {
		t.Fatalf("upstream got %q", l)
	}
	// Its PUBACK may come after mosquitto_sub printed it (and the next
	// publish need not wait for it).
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Sent == 1 && s.Queued == 0 }); err != nil {
		t.Fatal(err)
	}
	px.swallow.Store(true)
	publish(ctx, t, edge.Broker, "sensors/a", "swallowed", false)
	select {
	case <-px.ate:
	case <-ctx.Done():
		t.Fatal("the bridge never sent the message")
	}
	if s := br.Stats(); s.Queued != 1 || s.Sent != 1 {
		t.Fatalf("stats %+v: want the message queued, awaiting its PUBACK", s)
	}
	px.swallow.Store(false)
	px.cut()
	publish(ctx, t, edge.Broker, "sensors/a", "after", false)
	publish(ctx, t, edge.Broker, "sensors/end", "end", false)
	var got []string
	for len(got) == 0 || got[len(got)-1] != "site-1/sensors/end end" {
		got = append(got, up.next(ctx, t, "the messages after the cut"))
	}
	if want := "site-1/sensors/a swallowed\nsite-1/sensors/a after\nsite-1/sensors/end end"; strings.Join(got, "\n") != want {
		t.Fatalf("upstream got\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
	// The PUBACK of the last one may come after mosquitto_sub printed it.
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
		t.Fatal(err)
	}
	if s := br.Stats(); s.Sent != 4 || s.Connects < 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestUpstreamRefuses: a refused CONNECT (wrong password) and a TLS
// failure (a CA that did not sign the upstream's certificate) are logged
// with their reason, kept in LastError, and retried with backoff.
func TestUpstreamRefuses(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquitto(t, pki, false)
	other := testutil.NewPKI(t)
	otherCA := t.TempDir() + "/other-ca.pem"
	if err := writeFile(otherCA, other.CA.CertPEM()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, table, says string
	}{
		{"wrong password", fmt.Sprintf("url = \"mqtt://127.0.0.1:%s\"\nusername = %q\npassword = \"wrong\"\n", mq.port, upUser), "upstream refused the connection: not authorized (CONNACK reason 0x87)"},
		{"wrong CA", fmt.Sprintf("url = \"mqtts://127.0.0.1:%s\"\nca_file = %q\nusername = %q\npassword = %q\n", mq.tlsPort, otherCA, upUser, upPass), "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			edge := startEdge(t, pki)
			cfg := config(t, "[[bridge]]\nname = \"cloud\"\nout = [\"sensors/#\"]\nreconnect_min = \"20ms\"\nreconnect_max = \"100ms\"\n"+tc.table)
			br := startBridge(t, edge.Broker, cfg)
			publish(ctx, t, edge.Broker, "sensors/a", "waits", false)
			if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.ConnectFailures >= 3 }); err != nil {
				t.Fatalf("no retries: %+v", br.Stats())
			}
			s := br.Stats()
			if s.Connects != 0 || s.Connected || s.Queued != 1 || !strings.Contains(s.LastError, tc.says) {
				t.Fatalf("stats %+v, want retries, the message queued and an error saying %q", s, tc.says)
			}
		})
	}
}
