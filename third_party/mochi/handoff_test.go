package mqtt

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// repeatConn is a connection whose reads give one packet's bytes n times,
// then io.EOF; writes are discarded.
type repeatConn struct {
	pk   []byte
	n    int
	off  int
	read int // packets started
}

func (c *repeatConn) Read(p []byte) (int, error) {
	if c.off == len(c.pk) || c.read == 0 {
		if c.read == c.n {
			return 0, io.EOF
		}
		c.read++
		c.off = 0
	}
	n := copy(p, c.pk[c.off:])
	c.off += n
	return n, nil
}

func (c *repeatConn) Write(p []byte) (int, error)        { return len(p), nil }
func (c *repeatConn) Close() error                       { return nil }
func (c *repeatConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *repeatConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *repeatConn) SetDeadline(t time.Time) error      { return nil }
func (c *repeatConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *repeatConn) SetWriteDeadline(t time.Time) error { return nil }

// publishBytes encodes a PUBLISH of a 110-byte payload at qos.
func publishBytes(tb testing.TB, qos byte) []byte {
	tb.Helper()
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos},
		ProtocolVersion: 4,
		TopicName:       "bench/topic",
		Payload:         bytes.Repeat([]byte{'x'}, 110),
	}
	if qos > 0 {
		pk.PacketID = 7
	}
	var buf bytes.Buffer
	require.NoError(tb, pk.PublishEncode(&buf))
	return buf.Bytes()
}

// BenchmarkReadPublish measures a client's reader handling one PUBLISH
// (no subscribers; QoS 1 answered with a PUBACK): reading, decoding, the
// hooks and processPublish, with the hand-off to a worker goroutine
// (handoff.go) where the fork has it.
func BenchmarkReadPublish(b *testing.B) {
	for _, qos := range []byte{0, 1} {
		b.Run([]string{"qos0", "qos1"}[qos], func(b *testing.B) {
			s := newServer()
			conn := &repeatConn{pk: publishBytes(b, qos), n: b.N}
			cl := s.NewClient(conn, "bench", "bench", false)
			cl.Properties.ProtocolVersion = 4
			cl.State.Inflight.ResetReceiveQuota(math.MaxInt32) // as a CONNECT would
			b.ReportAllocs()
			b.ResetTimer()
			err := cl.Read(s.receivePacket)
			b.StopTimer()
			if !errors.Is(err, io.EOF) {
				b.Fatalf("read: %v, want EOF", err)
			}
			if got := cl.ops.info.MessagesReceived; got != int64(b.N) {
				b.Fatalf("%d messages received, want %d", got, b.N)
			}
		})
	}
}

// TestHandoffBlockedWorkerDoesNotBlockOthers blocks one client's packet
// handling on its worker and sees other clients' packets handled
// meanwhile, each client's in order and one at a time, then the idle pool
// within its bound.
func TestHandoffBlockedWorkerDoesNotBlockOthers(t *testing.T) {
	newReader := func(n int) *Client {
		cl, _, _ := newTestClient()
		cl.Net.bconn = newConnReader(&repeatConn{pk: publishBytes(t, 0), n: n}, 0)
		cl.Properties.ProtocolVersion = 4
		return cl
	}

	entered, release := make(chan struct{}), make(chan struct{})
	blocked := newReader(1)
	blockedDone := make(chan error, 1)
	go func() {
		blockedDone <- blocked.Read(func(cl *Client, pk packets.Packet) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered

	const readers, each = 16, 200
	var wg sync.WaitGroup
	errs := make([]error, readers)
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl := newReader(each)
			var handled, inside int
			err := cl.Read(func(cl *Client, pk packets.Packet) error {
				inside++
				if inside != 1 {
					return errors.New("two packets of one client handled at once")
				}
				handled++
				inside--
				return nil
			})
			if !errors.Is(err, io.EOF) {
				errs[i] = err
			} else if handled != each {
				errs[i] = errors.New("packets lost")
			}
		}(i)
	}
	wg.Wait() // hangs if the blocked worker held the others up
	for _, err := range errs {
		require.NoError(t, err)
	}

	close(release)
	require.ErrorIs(t, <-blockedDone, io.EOF)
	require.LessOrEqual(t, idleWorkers(), maxIdleWorkers())
}
