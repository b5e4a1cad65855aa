package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
)

// Worst-case costs a client can make the broker spend within its bounds
// (docs/security.md, "What a client can cost"). cpu-ns/op is the whole
// test process (broker and client); heap figures are after a GC.

// heapInuse returns the live heap after a GC.
func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// BenchmarkLargestHTTPPublish: one publish of the largest allowed payload
// (--max-payload, 256 KiB) to the deepest allowed topic (16 levels), QoS 1,
// over HTTP/3 and over HTTP/1.1 on TCP, with the default history.
func BenchmarkLargestHTTPPublish(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 256<<10)
	topic := "t" + strings.Repeat("/a", 15)
	br := brokertest.Start(b, nil, nil)
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"h3", testutil.H3Client(br.PKI.Pool(), nil), br.URL},
		{"tcp", &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: br.PKI.Pool()}}}, "https://" + br.TCPAddr().String()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			post := func() {
				resp, err := tc.c.Post(tc.url+"/v1/topics/"+topic+"?qos=1", "application/octet-stream", bytes.NewReader(payload))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			post()
			b.ReportAllocs()
			before := cpuTime()
			b.ResetTimer()
			for range b.N {
				post()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

// silentConn passes the first datagram a QUIC client sends (its Initial)
// and nothing after, and delivers it nothing: the broker holds a
// handshake that never completes.
type silentConn struct {
	net.PacketConn
	once   sync.Once
	closed chan struct{}
}

func (c *silentConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	sent := false
	c.once.Do(func() { sent = true })
	if sent {
		return c.PacketConn.WriteTo(p, addr)
	}
	return len(p), nil
}

func (c *silentConn) ReadFrom([]byte) (int, net.Addr, error) {
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

// BenchmarkHalfOpenQUIC: the broker's heap per QUIC handshake that sent
// its Initial and never answered (half-open; the client's own state freed
// before the measurement). At most --quic-retry-above (64) such
// handshakes are held from unvalidated addresses before a Retry is asked.
func BenchmarkHalfOpenQUIC(b *testing.B) {
	const n = 60 // below the Retry threshold: each is a full half-open handshake
	br := brokertest.Start(b, nil, &broker.Options{Limits: broker.Limits{MaxConnsPerAddr: 1000}})
	addr, err := net.ResolveUDPAddr("udp", strings.TrimPrefix(br.URL, "https://"))
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		before := heapInuse()
		for range n {
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			sc := &silentConn{PacketConn: pc, closed: make(chan struct{})}
			tr := &quic.Transport{Conn: sc}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, _ = tr.Dial(ctx, addr, &tls.Config{RootCAs: br.PKI.Pool(), NextProtos: []string{http3.NextProtoH3}}, nil)
			cancel()
			_ = sc.Close() // a user-given conn: the transport does not close it
			_ = tr.Close()
		}
		deadline := time.Now().Add(10 * time.Second)
		for br.Stats().QUICHalfOpen < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if h := br.Stats().QUICHalfOpen; h != n {
			b.Fatalf("%d half-open handshakes, want %d", h, n)
		}
		b.Logf("%d half-open handshakes", n)
		b.ReportMetric(float64(heapInuse()-before)/n, "heap-B/half-open")
	}
}
