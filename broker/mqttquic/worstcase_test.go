package mqttquic

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
)

// Worst-case memory a client can make the MQTT side hold within its bounds
// (docs/security.md, "What a client can cost"). Heap figures are after a
// GC, for the whole test process (the client's side of each connection
// included).

func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// BenchmarkSilentPreConnect: heap and goroutines per connection that
// never sends CONNECT, 64 of them (--mqtt-max-preconnect-per-addr's
// default) from one address: TCP; TLS with and without a finished
// handshake; MQTT over QUIC with its stream opened and nothing sent (the
// broker waits for the stream, --mqtt-connect-timeout's StreamTimeout)
// and with the first byte of a CONNECT sent (the stream reaches the
// broker, counted per address); a WebSocket upgrade with no CONNECT. The
// client's side of each connection is in the figures too (over QUIC about
// as much as the broker's).
func BenchmarkSilentPreConnect(b *testing.B) {
	const n = 64
	pki := newPKI(b)
	s := startServer(b, pki, func(o *Options) {
		o.TCPAddr = "127.0.0.1:0"
		o.TLSAddr = "127.0.0.1:0"
		o.WSAddr = "127.0.0.1:0"
		o.Limits.ConnectTimeout = time.Hour
		o.Limits.MaxPreConnectPerAddr = n
		o.StreamTimeout = time.Hour
	})
	for _, tr := range []string{"tcp", "tls-raw", "tls", "quic", "quic-byte", "ws"} {
		b.Run(tr, func(b *testing.B) {
			for range b.N {
				before, g := heapInuse(), runtime.NumGoroutine()
				accepted := s.quic.Accepted.Load()
				var conns []io.Closer
				for range n {
					var c io.Closer
					var err error
					switch tr {
					case "tcp":
						c, err = net.Dial("tcp", s.TCPAddr())
					case "tls-raw":
						c, err = net.Dial("tcp", s.TLSAddr())
					case "tls":
						c, err = tls.Dial("tcp", s.TLSAddr(), &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost"})
					case "quic":
						c = dialQUICStream(b, s, pki) // a stream the broker sees only with its first byte
					case "quic-byte":
						nc := dialQUICStream(b, s, pki)
						c = nc
						_, err = nc.Write([]byte{packets.Connect << 4})
					case "ws":
						d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 30 * time.Second}
						var wc *websocket.Conn
						if wc, _, err = d.Dial("ws://"+s.WSAddr()+WSPath, nil); err == nil {
							c = wc
						}
					}
					if err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
				}
				held := n
				if tr == "quic" {
					held = 0
					waitForCond(b, func() bool { return s.quic.Accepted.Load()-accepted == n }, "every connection accepted")
				}
				waitForCond(b, func() bool { return s.compat.pre.held() == held }, "every connection counted")
				b.ReportMetric(float64(heapInuse()-before)/n, "heap-B/conn")
				b.ReportMetric(float64(runtime.NumGoroutine()-g)/n, "goroutines/conn")
				for _, c := range conns {
					_ = c.Close()
				}
				waitForCond(b, func() bool { return s.compat.pre.held() == 0 }, "every connection released")
			}
		})
	}
}

// silentConn is a QUIC client's socket that sends its first datagram (an
// Initial), or with whole its first flight (every datagram until the
// server answers), and nothing after, and delivers it nothing: the server
// holds a handshake that never completes.
type silentConn struct {
	net.PacketConn
	whole    bool
	n        atomic.Int32  // datagrams written
	muted    atomic.Bool   // nothing more goes out
	answered chan struct{} // closed once the server answered (or the socket closed)
	once     sync.Once
	closed   chan struct{}
}

func (c *silentConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.muted.Load() || !c.whole && c.n.Load() > 0 {
		return len(p), nil
	}
	c.n.Add(1)
	return c.PacketConn.WriteTo(p, addr)
}

// ReadFrom waits for the server's first datagram, which it keeps from the
// client, and then for Close.
func (c *silentConn) ReadFrom(p []byte) (int, net.Addr, error) {
	_, _, _ = c.PacketConn.ReadFrom(p)
	c.muted.Store(true)
	c.once.Do(func() { close(c.answered) })
	<-c.closed
	return 0, nil, net.ErrClosed
}

func (c *silentConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return c.PacketConn.Close()
}

// BenchmarkHalfOpenMQTTQUIC: the heap per MQTT-over-QUIC handshake that
// sent its first Initial datagram ("initial", as BenchmarkHalfOpenQUIC
// of the HTTP/3 side) or its whole first flight (its ClientHello with a
// post-quantum key share takes two datagrams; the server answers with its
// own flight) and never answered (half-open; the client's own state freed
// before the measurement), 60 of them below the Retry threshold
// (--quic-retry-above, 64); then 40 more attempts, of which only those up
// to the threshold are held: the rest are answered with a stateless Retry
// (which these clients never answer; retries counts the Retry packets,
// one per Initial datagram). cpu-ns/attempt is the process's
// (client's included) per held attempt.
func BenchmarkHalfOpenMQTTQUIC(b *testing.B) {
	const n, more, threshold = 60, 40, 64 // threshold: --quic-retry-above's default
	for _, whole := range []bool{false, true} {
		name := "initial"
		if whole {
			name = "flight"
		}
		b.Run(name, func(b *testing.B) {
			pki := newPKI(b)
			s := startServer(b, pki, nil)
			addr := s.QUICAddr()
			attempt := func() {
				pc, err := net.ListenPacket("udp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				sc := &silentConn{PacketConn: pc, whole: whole, answered: make(chan struct{}), closed: make(chan struct{})}
				tr := &quic.Transport{Conn: sc}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = tr.Dial(ctx, addr, &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost", NextProtos: []string{ALPN}}, nil)
				}()
				if whole {
					<-sc.answered
				} else {
					waitForCond(b, func() bool { return sc.n.Load() > 0 }, "the Initial sent")
				}
				sc.muted.Store(true) // the client gives up: its close goes nowhere
				cancel()
				<-done
				_ = sc.Close() // a user-given conn: the transport does not close it
				_ = tr.Close()
			}
			for range b.N {
				waitForCond(b, func() bool { return s.Security().QUICHalfOpen == 0 }, "earlier handshakes to time out")
				before := heapInuse()
				cpu := cpuTime()
				for range n {
					attempt()
				}
				waitForCond(b, func() bool { return s.Security().QUICHalfOpen == n }, "every half-open handshake counted")
				b.ReportMetric(float64(cpuTime()-cpu)/n, "cpu-ns/attempt")
				b.ReportMetric(float64(heapInuse()-before)/n, "heap-B/half-open")
				retries := s.Security().QUICRetries
				for range more {
					attempt()
				}
				waitForCond(b, func() bool { return s.Security().QUICHalfOpen == threshold }, "the threshold's handshakes held")
				st := s.Security()
				b.ReportMetric(float64(st.QUICHalfOpen), "half-open-held")
				b.ReportMetric(float64(st.QUICRetries-retries), "retries")
			}
		})
	}
}

// BenchmarkRetainedReplayMQTT: one SUBSCRIBE to # over MQTT/TCP with the
// retained store at its bound (--retained-bytes, 16 MiB), in two shapes:
// the largest payloads (256 KiB) and many small messages (10 bytes). cpu-ns
// is the whole process (broker and client) from the SUBSCRIBE until the
// client read the last retained message; alloc-B what was allocated
// meanwhile (the client's reading included); received the retained
// messages delivered, dropped those mochi did not send (QoS 0 deliveries
// beyond --mqtt-max-queued-bytes or Options.MaxPendingWrites packets
// waiting to be written); retained counts
// mochi's own $SYS topics too, which # does not match.
func BenchmarkRetainedReplayMQTT(b *testing.B) {
	for _, shape := range []struct {
		name    string
		payload int
	}{{"256KiB", 256<<10 - 64}, {"10B", 10}} {
		b.Run(shape.name, func(b *testing.B) {
			br := startBridged(b, nil)
			payload := bytes.Repeat([]byte("r"), shape.payload)
			stored, sys := 0, br.mqtt.MQTT().Topics.Retained.Len() // mochi's own $SYS topics
			for full := false; !full; {
				for range 4096 {
					_, err := br.h3.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("r/%06d", stored), Payload: payload, Retain: true})
					if errors.Is(err, broker.ErrRetainedFull) {
						full = true
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					stored++
				}
				waitForCond(b, func() bool { return br.mqtt.MQTT().Topics.Retained.Len() == sys+stored }, "the bridge to retain every message")
			}
			b.Logf("%d retained messages, %d bytes", stored, br.h3.Broker.Stats().RetainedBytes)
			b.ResetTimer()
			for i := range b.N {
				c := mustConnect(b, br.mqtt, br.pki, "tcp", connectOpts{id: fmt.Sprintf("replay%d", i), clean: true})
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				alloc, cpu, dropped := ms.TotalAlloc, cpuTime(), atomic.LoadInt64(&br.mqtt.MQTT().Info.MessagesDropped)
				if got := c.subscribe("#"); got[0] > 1 {
					b.Fatalf("SUBACK %x", got)
				}
				received := len(c.pending)
				for received < stored {
					pk, err := c.read(30 * time.Second)
					if err != nil {
						b.Fatalf("after %d of %d: %v", received, stored, err)
					}
					if pk.FixedHeader.Type == packets.Publish {
						c.ack(pk)
						received++
					}
				}
				elapsed := cpuTime() - cpu
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(elapsed), "cpu-ns/subscribe")
				b.ReportMetric(float64(ms.TotalAlloc-alloc), "alloc-B/subscribe")
				b.ReportMetric(float64(received), "received")
				b.ReportMetric(float64(atomic.LoadInt64(&br.mqtt.MQTT().Info.MessagesDropped)-dropped), "dropped")
				b.ReportMetric(float64(sys+stored), "retained")
				_ = c.nc.Close()
			}
		})
	}
}

// BenchmarkStalledMQTTSubscriber: heap held by one MQTT subscriber (TCP,
// QoS 1) that never reads while 100 messages of 256 KiB are published to
// its filter: bounded by --mqtt-max-queued-bytes (4 MiB) plus what mochi's
// writer and the socket buffers hold.
func BenchmarkStalledMQTTSubscriber(b *testing.B) {
	payload := []byte(strings.Repeat("x", 256<<10))
	for range b.N {
		br, _ := startSecure(b, aclFile, nil)
		c := mustConnect(b, br.mqtt, br.pki, "tcp", connectOpts{id: "stalled", clean: true})
		if got := c.subscribe("public/#"); got[0] != 1 {
			b.Fatalf("SUBACK %x", got)
		}
		before := heapInuse()
		for range 100 {
			if _, err := br.h3.Broker.Publish(context.Background(), broker.Message{Topic: "public/big", Payload: payload, QoS: 1}); err != nil {
				b.Fatal(err)
			}
		}
		waitForCond(b, func() bool {
			st := br.mqtt.Security()
			return st.BridgeQueueBytes == 0 && st.DroppedQueueFull+st.DroppedInflight > 0
		}, "the bridge to deliver or drop every message")
		st := br.mqtt.Security()
		b.ReportMetric(float64(heapInuse()-before), "heap-B")
		b.ReportMetric(float64(st.QueuedBytes), "queued-B")
		b.ReportMetric(float64(st.DroppedQueueFull+st.DroppedInflight), "dropped")
	}
}
