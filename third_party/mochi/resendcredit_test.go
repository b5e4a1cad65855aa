// quiot: added (QUIOT.md, change 16).
package mqtt

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mochi-mqtt/server/v2/packets"
)

// quotaAtConnack records a client's send quota when its CONNACK is sent:
// the client is in Clients then, so a delivery to it may already use the
// quota.
type quotaAtConnack struct {
	HookBase
	quota atomic.Int32
	seen  atomic.Bool
}

func (h *quotaAtConnack) ID() string { return "quota-at-connack" }
func (h *quotaAtConnack) Provides(b byte) bool {
	return b == OnPacketSent
}
func (h *quotaAtConnack) OnPacketSent(cl *Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Connack {
		h.quota.Store(atomic.LoadInt32(&cl.State.Inflight.sendQuota))
		h.seen.Store(true)
	}
}

// TestResendCreditTakenBeforeDeliveries: a client resuming a session with
// a message in flight, with Receive Maximum 2, has one credit left from
// the moment it can get deliveries (MQTT 5 4.9): upstream reset the quota
// at the reconnect and resent without counting, and quiot took the resent
// messages from it only after the resend, so a message published meanwhile
// could go out on the whole Receive Maximum.
func TestResendCreditTakenBeforeDeliveries(t *testing.T) {
	s := newServer()
	defer s.Close()
	s.Options.Capabilities.ReceiveMaximum = 10 // the server's, as quiot sets it: flow control on
	h := new(quotaAtConnack)
	require.NoError(t, s.AddHook(h, nil))

	old, r0, _ := newTestClient()
	go func() { _, _ = io.Copy(io.Discard, r0) }() // the takeover's DISCONNECT
	old.Properties.ProtocolVersion = 5
	old.ID = "resumer"
	old.State.Inflight.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/b", Payload: []byte("x"), PacketID: 7})
	s.Clients.Add(old)

	connect := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{
			ProtocolName:     []byte("MQTT"),
			Clean:            false,
			Keepalive:        30,
			ClientIdentifier: "resumer",
		},
		Properties: packets.Properties{ReceiveMaximum: 2, SessionExpiryInterval: 600, SessionExpiryIntervalFlag: true},
	}
	var raw bytes.Buffer
	require.NoError(t, connect.ConnectEncode(&raw))

	r, w := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.EstablishConnection("tcp", r) }()
	go func() { _, _ = io.Copy(io.Discard, w) }()
	_, err := w.Write(raw.Bytes())
	require.NoError(t, err)
	_, err = w.Write([]byte{byte(packets.Disconnect << 4), 0})
	require.NoError(t, err)
	<-done
	_ = w.Close()

	require.True(t, h.seen.Load(), "no CONNACK sent")
	require.Equal(t, int32(1), h.quota.Load(), "send quota when the client could first get a delivery")
}
