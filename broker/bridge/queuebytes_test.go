package bridge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testutil"
)

// stalledUpstream is an MQTT 5 upstream that accepts the bridge's CONNECT
// with a CONNACK and then answers nothing (a broker that hangs): the
// bridge's publishes get no PUBACK. got is closed once it has read the
// first PUBLISH (the message in flight).
func stalledUpstream(t *testing.T) (addr string, got <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done, read := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { close(done); _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := skipPacket(r); err != nil { // the CONNECT
					return
				}
				if _, err := c.Write([]byte{0x20, 0x03, 0x00, 0x00, 0x00}); err != nil { // CONNACK, success
					return
				}
				// Read and discard, answer nothing; report the first PUBLISH.
				// Another packet may come first (a DISCONNECT when the
				// client gave up on a slow CONNACK under load, and dialled
				// again): a fresh-clone make test with two busy loops beside
				// saw the test go on before the bridge was connected.
				for {
					typ, err := skipPacket(r)
					if err != nil {
						return
					}
					if typ == 3 { // PUBLISH
						break
					}
				}
				once.Do(func() { close(read) })
				_, _ = io.Copy(io.Discard, r)
				<-done
			}()
		}
	}()
	return l.Addr().String(), read
}

// TestBridgeQueueBytes: the bytes a bridge holds for its upstream are
// bounded by queue_bytes (payload, remote topic and 64 bytes a message)
// when the upstream cannot take them: unreachable (connection refused) or
// stalled (connected, no PUBACK ever). The oldest messages are dropped and
// counted, those in flight to the stalled upstream included, and the queue
// keeps the newest.
func TestBridgeQueueBytes(t *testing.T) {
	const (
		n        = 200
		size     = 1 << 10
		maxBytes = 16 << 10
	)
	for _, tc := range []struct {
		name      string
		addr      func(t *testing.T) (string, <-chan struct{})
		connected bool
	}{
		{"unreachable", func(t *testing.T) (string, <-chan struct{}) { return "127.0.0.1:" + freePort(t), nil }, false},
		{"stalled", stalledUpstream, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			edge := startEdge(t, testutil.NewPKI(t))
			addr, inFlight := tc.addr(t)
			br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "up"
url           = "mqtt://%s"
out           = ["sensors/#"]
remote_prefix = "site-1/"
queue_bytes   = %d
reconnect_min = "1s"
`, addr, maxBytes)))
			payload := strings.Repeat("p", size)
			first := 0
			if inFlight != nil {
				// The first message goes out and waits for its PUBACK.
				publish(ctx, t, edge.Broker, "sensors/000", payload, false)
				first = 1
				select {
				case <-inFlight:
				case <-ctx.Done():
					t.Fatalf("the bridge never published to the stalled upstream: %+v", br.Stats())
				}
			}
			for i := first; i < n; i++ {
				publish(ctx, t, edge.Broker, fmt.Sprintf("sensors/%03d", i), payload, false)
			}
			cost := int64(size + len("site-1/sensors/000") + 64)
			s := br.Stats()
			if s.QueuedBytes > maxBytes || s.QueuedBytes != int64(s.Queued)*cost || s.Queued != maxBytes/int(cost) {
				t.Fatalf("stats %+v: want %d messages queued, %d bytes each, within queue_bytes %d", s, maxBytes/int(cost), cost, maxBytes)
			}
			if s.Dropped != uint64(n-s.Queued) || s.Sent != 0 || s.Connected != tc.connected {
				t.Fatalf("stats %+v: want the %d others dropped, none sent, connected %v", s, n-s.Queued, tc.connected)
			}
		})
	}
}

// skipPacket reads one MQTT packet from r and returns its type.
func skipPacket(r *bufio.Reader) (byte, error) {
	fh, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	n, err := readLength(r)
	if err != nil {
		return 0, err
	}
	_, err = io.CopyN(io.Discard, r, int64(n))
	return fh >> 4, err
}

// readLength reads an MQTT remaining length.
func readLength(r io.ByteReader) (int, error) {
	n, mul := 0, 1
	for range 4 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		n += int(b&0x7f) * mul
		mul <<= 7
		if b&0x80 == 0 {
			return n, nil
		}
	}
	return 0, errors.New("malformed remaining length")
}
