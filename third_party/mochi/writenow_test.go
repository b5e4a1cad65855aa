package mqtt

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// tcpPair returns the two ends of a loopback TCP connection, closed when
// the test ends.
func tcpPair(t *testing.T) (server, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		accepted <- c
	}()
	peer, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = server.Close(); _ = peer.Close() })
	return server, peer
}

// newTCPTestClient returns a client of s on conn, as newTestClient does on
// a pipe.
func newTCPTestClient(s *Server, conn net.Conn) *Client {
	cl := s.NewClient(conn, "tcp", "mochi", false)
	cl.Properties.ProtocolVersion = 4
	return cl
}

// readPublishes reads n QoS 0 PUBLISH packets from r and returns their
// payloads in the order read.
func readPublishes(t *testing.T, r io.Reader, n int) [][]byte {
	t.Helper()
	br := bufio.NewReader(r)
	var out [][]byte
	for len(out) < n {
		b, err := br.ReadByte()
		require.NoError(t, err)
		require.Equal(t, byte(packets.Publish<<4), b, "packet %d: fixed header", len(out))
		size, err := binary.ReadUvarint(br) // MQTT's remaining length is the same base-128 encoding
		require.NoError(t, err)
		body := make([]byte, size)
		_, err = io.ReadFull(br, body)
		require.NoError(t, err)
		topic := int(binary.BigEndian.Uint16(body))
		out = append(out, body[2+topic:])
	}
	return out
}

// A delivery to a client with nothing queued is written by the goroutine
// delivering it, whole, in the form the writer writes (QUIOT.md, change
// 17).
func TestDeliveryWrittenByDeliverer(t *testing.T) {
	s := newServer()
	conn, peer := tcpPair(t)
	cl := newTCPTestClient(s, conn)
	require.NotNil(t, cl.rawConn(), "a TCP connection hands out its socket")
	cl.Net.raw, cl.Net.rawLooked = nil, false // looked up again by the delivery

	pk := *packets.TPacketData[packets.Publish].Get(packets.TPublishBasic).Packet
	_, err := s.publishToClient(cl, packets.Subscription{Filter: pk.TopicName}, pk)
	require.NoError(t, err)
	require.Equal(t, int64(1), atomic.LoadInt64(&s.Info.InlineWrites), "written by the deliverer")
	require.False(t, cl.State.writing.Load(), "writer role given back")
	require.Equal(t, 0, cl.State.outbound.len())
	require.Equal(t, int64(1), atomic.LoadInt64(&s.Info.MessagesSent))

	want := packets.TPacketData[packets.Publish].Get(packets.TPublishBasic).RawBytes
	got := make([]byte, len(want))
	_, err = io.ReadFull(peer, got)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// A subscriber that does not read fills its socket: the deliveries to it
// never wait (the publisher goes on), and once it reads it gets every one
// of them, whole and in order, whether written at once, partly written
// with the rest buffered, or queued.
func TestDeliveryToFullSocketKeepsOrder(t *testing.T) {
	const n = 60
	s := newServer()
	s.Options.Capabilities.MaximumClientWritesPending = n
	s.Options.Capabilities.MaximumClientWritesPendingBytes = 0
	s.Options.Capabilities.MaximumWritesPendingBytes = 0
	conn, peer := tcpPair(t)
	require.NoError(t, conn.SetWriteBuffer(4096))
	require.NoError(t, peer.SetReadBuffer(4096))
	cl := newTCPTestClient(s, conn)
	cl.State.outbound.max = n + 1

	for i := 0; i < n; i++ {
		payload := make([]byte, 1000)
		binary.BigEndian.PutUint32(payload, uint32(i))
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "a/b", Payload: payload}
		_, err := s.publishToClient(cl, packets.Subscription{Filter: "a/b"}, pk)
		require.NoError(t, err, "delivery %d", i)
	}
	inline := atomic.LoadInt64(&s.Info.InlineWrites)
	t.Logf("%d of %d deliveries written at once", inline, n)
	require.Positive(t, inline, "the first deliveries went at once")
	require.Less(t, inline, int64(n), "a full socket sent the rest to the writer")

	got := readPublishes(t, peer, n)
	for i, p := range got {
		require.Len(t, p, 1000, "delivery %d", i)
		require.Equal(t, uint32(i), binary.BigEndian.Uint32(p), "delivery %d out of order", i)
	}
}

// A connection that hands out no socket (a pipe here; TLS, WebSocket and
// QUIC in quiot) keeps the writer goroutine.
func TestDeliveryWithoutSocketQueued(t *testing.T) {
	s := newServer()
	r, w := net.Pipe()
	defer w.Close()
	cl := newTCPTestClient(s, w)
	require.Nil(t, cl.rawConn())
	go func() { _, _ = io.Copy(io.Discard, r) }()
	pk := *packets.TPacketData[packets.Publish].Get(packets.TPublishBasic).Packet
	_, err := s.publishToClient(cl, packets.Subscription{Filter: pk.TopicName}, pk)
	require.NoError(t, err)
	require.Zero(t, atomic.LoadInt64(&s.Info.InlineWrites))
}

// countedConn is a TCP connection that counts its Write calls: a write
// through its socket (RawConn) does not call Write.
type countedConn struct {
	*net.TCPConn
	writes atomic.Int32
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.TCPConn.Write(b)
}

// A packet WritePacket answers with goes out through the socket, not the
// connection's Write (change 26); what the socket does not take goes
// through Write, after it, so the peer reads the packet whole.
func TestWritePacketWritesRaw(t *testing.T) {
	s := newServer()
	defer s.Close()
	conn, peer := tcpPair(t)
	require.NoError(t, conn.SetWriteBuffer(4096))
	require.NoError(t, peer.SetReadBuffer(4096))
	cc := &countedConn{TCPConn: conn}
	cl := newTCPTestClient(s, cc)

	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 7}
	require.NoError(t, cl.WritePacket(ack))
	require.Equal(t, int32(0), cc.writes.Load(), "written through the socket")
	require.False(t, cl.State.writing.Load(), "writer role given back")
	got := make([]byte, 4)
	_, err := io.ReadFull(peer, got)
	require.NoError(t, err)
	require.Equal(t, []byte{0x40, 2, 0, 7}, got)

	// 50 KB does not fit the socket's buffers: the rest waits in Write
	// until the peer reads.
	payload := make([]byte, 50_000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	big := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "a/b", Payload: payload}
	done := make(chan error, 1)
	go func() { done <- cl.WritePacket(big) }()
	read := readPublishes(t, peer, 1)
	require.NoError(t, <-done)
	require.Equal(t, payload, read[0])
	require.Equal(t, int32(1), cc.writes.Load(), "the rest written through Write")
	require.Equal(t, int64(2), atomic.LoadInt64(&s.Info.PacketsSent))
}

// The deliveries of a message share its payload; Publish copies its
// caller's payload once, so the caller may reuse its slice, and
// InjectPacket keeps the one it is given (change 26).
func TestDeliveriesSharePayload(t *testing.T) {
	s := newServer()
	defer s.Close()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/b", Payload: []byte("hello")}
	var outs []packets.Packet
	for _, id := range []string{"c1", "c2"} {
		cl, _, _ := newTestClient()
		cl.ID = id
		cl.Net.Conn = nil // nothing written: the packet as it would be queued
		out, _ := s.publishToClient(cl, packets.Subscription{Filter: "a/b", Qos: 1}, pk)
		require.Equal(t, pk.Payload, out.Payload)
		outs = append(outs, out)
	}
	require.True(t, &outs[0].Payload[0] == &pk.Payload[0] && &outs[1].Payload[0] == &pk.Payload[0], "a copy of the payload per delivery")

	s2 := newServerWithInlineClient()
	defer s2.Close()
	cl, _, _ := newTestClient()
	cl.ID = "sub"
	s2.Clients.Add(cl)
	s2.Topics.Subscribe("sub", packets.Subscription{Filter: "a/b", Qos: 1})
	payload := []byte("first")
	require.NoError(t, s2.Publish("a/b", payload, false, 1))
	copy(payload, "reuse") // the caller's buffer, reused
	injected := []byte("second")
	require.NoError(t, s2.InjectPacket(s2.inlineClient, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/b", Payload: injected, PacketID: 1}))
	var got []string
	for _, p := range cl.State.Inflight.GetAll(false) {
		got = append(got, string(p.Payload))
		if string(p.Payload) == "second" {
			require.True(t, &p.Payload[0] == &injected[0], "InjectPacket's payload copied")
		}
	}
	slices.Sort(got)
	require.Equal(t, []string{"first", "second"}, got, "what is in flight changed with Publish's caller's slice")
}
