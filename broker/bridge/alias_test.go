package bridge_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/testutil"
)

// topicRecorder relays TCP connections to target and records the topic
// name of every PUBLISH the client (the bridge) sends.
type topicRecorder struct {
	l      net.Listener
	mu     sync.Mutex
	topics []string
	conns  []net.Conn
}

func startTopicRecorder(t *testing.T, target string) *topicRecorder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &topicRecorder{l: l}
	t.Cleanup(func() { _ = l.Close(); r.cut() })
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
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
			go func() {
				defer u.Close()
				var buf []byte
				b := make([]byte, 32<<10)
				for {
					n, err := c.Read(b)
					if n > 0 {
						buf = append(buf, b[:n]...)
						buf = r.parse(buf)
						if _, werr := u.Write(b[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return r
}

// parse records the topics of the whole PUBLISH packets at the start of
// buf and returns the rest.
func (r *topicRecorder) parse(buf []byte) []byte {
	for {
		n, mul, i := 0, 1, 1
		for ; i < len(buf) && i <= 4; i++ {
			n += int(buf[i]&0x7f) * mul
			mul *= 128
			if buf[i]&0x80 == 0 {
				break
			}
		}
		if i >= len(buf) || len(buf) < i+1+n {
			return buf
		}
		if buf[0]>>4 == 3 {
			body := buf[i+1 : i+1+n]
			tl := int(binary.BigEndian.Uint16(body))
			r.mu.Lock()
			r.topics = append(r.topics, string(body[2:2+tl]))
			r.mu.Unlock()
		}
		buf = buf[i+1+n:]
	}
}

func (r *topicRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.topics
	r.topics = nil
	return t
}

func (r *topicRecorder) cut() {
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
}

// TestTopicAliases: over MQTT 5 the bridge names a topic once a
// connection and then sends its alias alone (an empty topic name); a new
// connection names it again. The upstream's subscribers get the full
// topics, in order.
func TestTopicAliases(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquitto(t, pki, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := mq.sub(ctx, t, "site-1/#")
	rec := startTopicRecorder(t, "127.0.0.1:"+mq.port)
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
`, rec.l.Addr(), upUser, upPass))
	br := startBridge(t, edge.Broker, cfg)
	send := func(msgs ...string) {
		t.Helper()
		var want []string
		for _, m := range msgs {
			topic, payload, _ := strings.Cut(m, " ")
			publish(ctx, t, edge.Broker, topic, payload, false)
			want = append(want, "site-1/"+m)
		}
		for _, w := range want {
			if got := up.next(ctx, t, w); got != w {
				t.Fatalf("upstream got %q, want %q", got, w)
			}
		}
		if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
			t.Fatal(err)
		}
	}
	send("sensors/a 1", "sensors/a 2", "sensors/b 3", "sensors/a 4", "sensors/b 5")
	if got, want := strings.Join(rec.take(), ","), "site-1/sensors/a,,site-1/sensors/b,,"; got != want {
		t.Fatalf("PUBLISH topics on the wire %q, want %q", got, want)
	}
	connects := br.Stats().Connects
	rec.cut()
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected && s.Connects > connects }); err != nil {
		t.Fatal(err)
	}
	send("sensors/b 6", "sensors/a 7", "sensors/b 8")
	if got, want := strings.Join(rec.take(), ","), "site-1/sensors/b,site-1/sensors/a,"; got != want {
		t.Fatalf("PUBLISH topics on the wire after a reconnect %q, want %q", got, want)
	}
}
