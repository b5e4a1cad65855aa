package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// quiot: tests of the poller (poller.go, QUIOT.md change 20) with real
// TCP connections on loopback.

// pollEvents is a hook that reports what the poller's clients did.
type pollEvents struct {
	HookBase
	disconnected chan error
	completed    chan uint16
	wills        chan string
}

func newPollEvents() *pollEvents {
	return &pollEvents{disconnected: make(chan error, 256), completed: make(chan uint16, 256), wills: make(chan string, 256)}
}

func (h *pollEvents) ID() string { return "poll-events" }

func (h *pollEvents) Provides(b byte) bool {
	return b == OnDisconnect || b == OnQosComplete || b == OnWillSent || b == OnConnectAuthenticate || b == OnACLCheck
}

func (h *pollEvents) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (h *pollEvents) OnACLCheck(*Client, string, bool) bool              { return true }
func (h *pollEvents) OnDisconnect(_ *Client, err error, _ bool)          { h.disconnected <- err }
func (h *pollEvents) OnQosComplete(_ *Client, pk packets.Packet)         { h.completed <- pk.PacketID }
func (h *pollEvents) OnWillSent(_ *Client, pk packets.Packet)            { h.wills <- pk.TopicName }

// pollServer starts a server that polls its TCP clients, with ev as a
// hook, and returns it and its listener's address.
func pollServer(t *testing.T, ev *pollEvents) (*Server, string) {
	t.Helper()
	if !pollSupported {
		t.Skip("no poller on this system (Linux only): clients keep their read loops")
	}
	s := New(&Options{PollReads: true, InlineClient: true, Logger: logger})
	require.NoError(t, s.AddHook(ev, nil))
	l := listeners.NewTCP(listeners.Config{ID: "tcp", Address: "127.0.0.1:0"})
	require.NoError(t, s.AddListener(l))
	require.NoError(t, s.Serve())
	t.Cleanup(func() {
		select {
		case <-s.done: // closed by the test
		default:
			_ = s.Close()
		}
	})
	return s, l.Address()
}

// pollClient is a raw MQTT 3.1.1 client over TCP.
type pollClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialPoll(t *testing.T, addr, id string, keepalive uint16, will bool) *pollClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	pc := &pollClient{t: t, c: c, r: bufio.NewReader(c)}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: keepalive, ClientIdentifier: id}}
	if will {
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "will/"+id, []byte("gone")
	}
	pc.send(pk, (*packets.Packet).ConnectEncode)
	require.Equal(t, packets.Connack, pc.next().FixedHeader.Type)
	return pc
}

func (pc *pollClient) send(pk packets.Packet, enc func(*packets.Packet, *bytes.Buffer) error) {
	pc.t.Helper()
	var b bytes.Buffer
	require.NoError(pc.t, enc(&pk, &b))
	_, err := pc.c.Write(b.Bytes())
	require.NoError(pc.t, err)
}

// next reads the next packet (its fixed header and body; not decoded
// beyond the packet identifier of a QoS 1 PUBLISH).
func (pc *pollClient) next() packets.Packet {
	pc.t.Helper()
	require.NoError(pc.t, pc.c.SetReadDeadline(time.Now().Add(30*time.Second)))
	hdr, err := pc.r.ReadByte()
	require.NoError(pc.t, err)
	var fh packets.FixedHeader
	require.NoError(pc.t, fh.Decode(hdr))
	rem, _, err := packets.DecodeLength(pc.r)
	require.NoError(pc.t, err)
	body := make([]byte, rem)
	_, err = io.ReadFull(pc.r, body)
	require.NoError(pc.t, err)
	fh.Remaining = rem
	pk := packets.Packet{FixedHeader: fh, ProtocolVersion: 4}
	if fh.Type == packets.Publish {
		require.NoError(pc.t, pk.PublishDecode(body))
	}
	return pk
}

func (pc *pollClient) subscribe(filter string) {
	pc.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}}, (*packets.Packet).SubscribeEncode)
	require.Equal(pc.t, packets.Suback, pc.next().FixedHeader.Type)
}

// polled waits until the server polls n clients.
func polled(t *testing.T, s *Server, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.poll.mu.Lock()
		defer s.poll.mu.Unlock()
		return len(s.poll.fds) == n
	}, 30*time.Second, time.Millisecond)
}

func wait[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the broker")
		panic("unreachable")
	}
}

func TestPollerAcknowledgements(t *testing.T) {
	ev := newPollEvents()
	s, addr := pollServer(t, ev)
	sub := dialPoll(t, addr, "sub", 60, false)
	sub.subscribe("t/#")
	polled(t, s, 1)

	// Whole PUBACKs (handled on the poller), one split across two writes
	// (a worker reads the rest), two in one write.
	for i, split := range []int{0, 1, 2, 0, 0} {
		require.NoError(t, s.Publish("t/a", []byte{byte(i)}, false, 1))
		pk := sub.next()
		require.Equal(t, packets.Publish, pk.FixedHeader.Type)
		var b bytes.Buffer
		ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}
		require.NoError(t, ack.PubackEncode(&b))
		if split > 0 {
			_, err := sub.c.Write(b.Bytes()[:split])
			require.NoError(t, err)
			_, err = sub.c.Write(b.Bytes()[split:])
			require.NoError(t, err)
		} else {
			_, err := sub.c.Write(b.Bytes())
			require.NoError(t, err)
		}
		require.Equal(t, pk.PacketID, wait(t, ev.completed))
	}
	require.NoError(t, s.Publish("t/a", []byte("x"), false, 1))
	require.NoError(t, s.Publish("t/b", []byte("y"), false, 1))
	p1, p2 := sub.next(), sub.next()
	var b bytes.Buffer
	for _, id := range []uint16{p1.PacketID, p2.PacketID} {
		ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}
		require.NoError(t, ack.PubackEncode(&b))
	}
	_, err := sub.c.Write(b.Bytes())
	require.NoError(t, err)
	require.ElementsMatch(t, []uint16{p1.PacketID, p2.PacketID}, []uint16{wait(t, ev.completed), wait(t, ev.completed)})
	polled(t, s, 1)
	cl, ok := s.Clients.Get("sub")
	require.True(t, ok)
	require.Equal(t, 0, cl.State.Inflight.Len())
}

func TestPollerLargePublishAndPing(t *testing.T) {
	ev := newPollEvents()
	s, addr := pollServer(t, ev)
	sub := dialPoll(t, addr, "sub", 60, false)
	sub.subscribe("big")
	pub := dialPoll(t, addr, "pub", 60, false)
	polled(t, s, 2)

	// A publish larger than every read buffer, sent in pieces.
	payload := bytes.Repeat([]byte("0123456789"), 10000)
	var b bytes.Buffer
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "big", Payload: payload}
	require.NoError(t, pk.PublishEncode(&b))
	for raw := b.Bytes(); len(raw) > 0; {
		n := min(len(raw), 3000)
		_, err := pub.c.Write(raw[:n])
		require.NoError(t, err)
		raw = raw[n:]
	}
	got := sub.next()
	require.Equal(t, payload, got.Payload)

	pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}, (*packets.Packet).PingreqEncode)
	require.Equal(t, packets.Pingresp, pub.next().FixedHeader.Type)
	polled(t, s, 2)
}

func TestPollerKeepalive(t *testing.T) {
	ev := newPollEvents()
	s, addr := pollServer(t, ev)
	c := dialPoll(t, addr, "quiet", 1, true)
	polled(t, s, 1)
	err := wait(t, ev.disconnected) // after 1.5 s without a packet
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Equal(t, "will/quiet", wait(t, ev.wills))
	polled(t, s, 0)
	_ = c
}

func TestPollerEnds(t *testing.T) {
	tests := []struct {
		name    string
		end     func(t *testing.T, s *Server, c *pollClient)
		errNil  bool
		willOut bool
	}{
		{name: "disconnect", errNil: true, end: func(t *testing.T, _ *Server, c *pollClient) {
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}}, (*packets.Packet).DisconnectEncode)
		}},
		{name: "closed by the client", willOut: true, end: func(t *testing.T, _ *Server, c *pollClient) {
			require.NoError(t, c.c.Close())
		}},
		{name: "disconnected by the server", willOut: true, end: func(t *testing.T, s *Server, _ *pollClient) {
			cl, ok := s.Clients.Get("c")
			require.True(t, ok)
			_ = s.DisconnectClient(cl, packets.ErrServerShuttingDown) // returns the code it sent
		}},
		{name: "socket closed under it", willOut: true, end: func(t *testing.T, s *Server, _ *pollClient) {
			// net.Conn.Close without Client.Stop (quiot's listener closes
			// what it tracks so at shutdown): a closed socket leaves the
			// epoll instance without an event; the sweep finds it.
			cl, ok := s.Clients.Get("c")
			require.True(t, ok)
			require.NoError(t, cl.Net.Conn.Close())
		}},
		{name: "taken over", willOut: true, end: func(t *testing.T, s *Server, _ *pollClient) {
			dialPoll(t, tcpAddr(s), "c", 60, false)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := newPollEvents()
			s, addr := pollServer(t, ev)
			c := dialPoll(t, addr, "c", 60, true)
			polled(t, s, 1)
			tt.end(t, s, c)
			err := wait(t, ev.disconnected)
			if tt.errNil {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			if tt.willOut {
				require.Equal(t, "will/c", wait(t, ev.wills))
			}
			select {
			case w := <-ev.wills:
				if !tt.willOut {
					t.Fatalf("will %q sent", w)
				}
			default:
			}
		})
	}
}

func TestPollerServerClose(t *testing.T) {
	ev := newPollEvents()
	s, addr := pollServer(t, ev)
	for _, id := range []string{"a", "b", "c"} {
		dialPoll(t, addr, id, 60, false)
	}
	polled(t, s, 3)
	require.NoError(t, s.Close())
	select {
	case <-s.poll.ended:
	default:
		t.Fatal("the poller's goroutine still runs after Close")
	}
	for i := 0; i < 3; i++ {
		wait(t, ev.disconnected)
	}
	require.Empty(t, s.poll.fds)
}

func TestPeekPacket(t *testing.T) {
	tests := []struct {
		in    []byte
		typ   byte
		whole bool
	}{
		{nil, 0, false},
		{[]byte{0x40}, 0, false},
		{[]byte{0x40, 2, 0}, 4, false},
		{[]byte{0x40, 2, 0, 1}, 4, true},
		{[]byte{0x40, 2, 0, 1, 0x70}, 4, true},
		{[]byte{0x30, 0x80}, 3, false},
		{[]byte{0x30, 0x80, 1}, 3, false},
		{append([]byte{0x30, 0x80, 1}, make([]byte, 128)...), 3, true},
		{[]byte{0x30, 0xff, 0xff, 0xff, 0x7f}, 3, false},            // 268435455 bytes to come
		{[]byte{0x30, 0xff, 0xff, 0xff, 0xff, 1}, 3, true},          // malformed: the decoder says so
		{[]byte{0x40, 0x80, 0x80, 0x80, 0x80, 0x80}, 4, false},      // the decoder reads on
		{[]byte{0x40, 0x80, 0x80, 0x80, 0x80, 0x00}, 4, true},       // five length bytes, none to come
		{[]byte{0x40, 0x80, 0x80, 0x80, 0x80, 0x02, 0, 1}, 4, true}, // 2 << 28: malformed
	}
	for _, tt := range tests {
		b := newConnReader(bytes.NewReader(nil), 1024)
		b.buf = append([]byte(nil), tt.in...)
		b.r, b.w = 0, len(tt.in)
		typ, whole := b.peekPacket()
		require.Equal(t, tt.whole, whole, "%x", tt.in)
		if len(tt.in) >= 2 {
			require.Equal(t, tt.typ, typ, "%x", tt.in)
		}
	}
}

func TestReadMore(t *testing.T) {
	b := newConnReader(bytes.NewReader(nil), 1024)
	src := bytes.NewReader(bytes.Repeat([]byte{7}, 3000))
	read := func(p []byte) (int, error) {
		n, err := src.Read(p)
		if errors.Is(err, io.EOF) && n > 0 {
			err = nil
		}
		return n, err
	}
	n, err := b.readMore(read)
	require.NoError(t, err)
	require.Equal(t, idleReadSize, n) // into the idle array
	b.r = 10                          // 10 bytes read: the rest moves to the front
	n, err = b.readMore(read)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, idleReadSize, b.Buffered())
	n, err = b.readMore(read) // full from the start: a pooled buffer takes over
	require.NoError(t, err)
	require.Equal(t, 1024-idleReadSize, n)
	require.NotNil(t, b.big)
	_, err = b.readMore(read) // the pooled buffer full too: a worker reads on
	require.ErrorIs(t, err, errPollBufferFull)
	b.r = b.w
	b.release()
	require.Nil(t, b.big)
}

// tcpAddr returns the address of the server's listener "tcp".
func tcpAddr(s *Server) string {
	l, ok := s.Listeners.Get("tcp")
	if !ok {
		return ""
	}
	return l.Address()
}

func TestPollerNoGoroutinePerClient(t *testing.T) {
	ev := newPollEvents()
	s, addr := pollServer(t, ev)
	dialPoll(t, addr, "first", 60, false)
	polled(t, s, 1)
	before := runtime.NumGoroutine()
	const n = 50
	for i := 0; i < n; i++ {
		dialPoll(t, addr, fmt.Sprintf("c%d", i), 60, false)
	}
	polled(t, s, n+1)
	// Each connection's goroutine ends once its client is in the poll.
	require.Eventually(t, func() bool { return runtime.NumGoroutine()-before < n/5 }, 30*time.Second, time.Millisecond,
		"goroutines: %d before, %d after %d clients", before, runtime.NumGoroutine(), n)
}

func TestPolledThen(t *testing.T) {
	var order []string
	step := func(name string) func(error) error {
		return func(err error) error {
			order = append(order, name+":"+fmt.Sprint(err))
			return fmt.Errorf("%s", name)
		}
	}
	pd := &Polled{then: []func(error) error{step("a")}}
	pd.Then(step("b"))
	pd.finish(errors.New("end"))
	pd.Then(step("c")) // after the end: runs at once, given b's result
	require.Equal(t, []string{"a:end", "b:a", "c:b"}, order)
	var c listeners.Continued = pd // the listener's interface
	require.Error(t, c)
}

// FuzzPeekPacket: peekPacket never panics, and a packet it calls whole
// is whole by the decoder's reading of its length.
func FuzzPeekPacket(f *testing.F) {
	f.Add([]byte{0x40, 2, 0, 1})
	f.Add([]byte{0x30, 0x80, 1})
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x40, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		b := newConnReader(bytes.NewReader(nil), 1024)
		b.buf = append([]byte(nil), in...)
		b.r, b.w = 0, len(in)
		_, whole := b.peekPacket()
		if !whole || len(in) < 2 {
			return
		}
		r := bytes.NewReader(in[1:])
		rem, n, err := packets.DecodeLength(r)
		if err != nil {
			return // malformed: ReadFixedHeader says so
		}
		if len(in)-1-n < rem {
			t.Fatalf("%x: called whole, but %d of %d body bytes are there", in, len(in)-1-n, rem)
		}
	})
}

// TestPollerNotHeldByHalfLength: a client that sends a PUBACK's header
// with a length still going on after four bytes (the decoder reads on)
// and then nothing must not hold the poller: another client's PUBACK is
// still handled. Before peekPacket read lengths as the decoder does, the
// poller took such a header for whole and waited in a read of that
// client's socket.
func TestPollerNotHeldByHalfLength(t *testing.T) {
	ev := newPollEvents()
	s, addr := pollServer(t, ev)
	bad := dialPoll(t, addr, "bad", 60, false)
	sub := dialPoll(t, addr, "sub", 60, false)
	sub.subscribe("t")
	polled(t, s, 2)
	_, err := bad.c.Write([]byte{0x40, 0x80, 0x80, 0x80, 0x80, 0x80})
	require.NoError(t, err)
	require.NoError(t, s.Publish("t", []byte("x"), false, 1))
	pk := sub.next()
	var b bytes.Buffer
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}
	require.NoError(t, ack.PubackEncode(&b))
	_, err = sub.c.Write(b.Bytes())
	require.NoError(t, err)
	require.Equal(t, pk.PacketID, wait(t, ev.completed))
}
