package mqttquic

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/device/client"
)

// rawConn is a hand-driven MQTT 5 client over TCP (mochi's packet codec).
type rawConn struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(pk packets.Packet, enc func(*packets.Packet, *bytes.Buffer) error) {
	r.t.Helper()
	pk.ProtocolVersion = 5
	var buf bytes.Buffer
	if err := enc(&pk, &buf); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.c.Write(buf.Bytes()); err != nil {
		r.t.Fatal(err)
	}
}

// read returns the next packet; PUBLISH packets are decoded.
func (r *rawConn) read() packets.Packet {
	r.t.Helper()
	hb, err := r.br.ReadByte()
	if err != nil {
		r.t.Fatal(err)
	}
	pk := packets.Packet{ProtocolVersion: 5}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		r.t.Fatal(err)
	}
	n, _, err := packets.DecodeLength(r.br)
	if err != nil {
		r.t.Fatal(err)
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r.br, body); err != nil {
		r.t.Fatal(err)
	}
	if pk.FixedHeader.Type == packets.Publish {
		if err := pk.PublishDecode(body); err != nil {
			r.t.Fatal(err)
		}
	}
	return pk
}

// TestNoProblemInfoKeepsSendTime: an MQTT 5 subscriber that asks for no
// problem information (Request Problem Information = 0) still gets the
// publisher's "quiot-time" user property on PUBLISH (MQTT 5 3.1.2.11.7),
// and subscribers that never asked keep getting it too; no message expiry
// is added to a message published without one.
func TestNoProblemInfoKeepsSendTime(t *testing.T) {
	pki := newPKI(t)
	s := startServer(t, pki, func(o *Options) { o.QUICAddr = "off"; o.TLS = nil; o.TCPAddr = "127.0.0.1:0" })
	for _, tc := range []struct {
		name          string
		noProblemInfo bool
	}{{"problem info default", false}, {"no problem info", true}, {"default after another asked for none", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, s.TCPAddr())
			conn := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}}
			conn.Connect.ProtocolName = []byte("MQTT")
			conn.Connect.Clean = true
			conn.Connect.Keepalive = 30
			conn.Connect.ClientIdentifier = "raw-" + t.Name()
			if tc.noProblemInfo {
				conn.Properties.RequestProblemInfoFlag = true
				conn.Properties.RequestProblemInfo = 0
			}
			r.send(conn, (*packets.Packet).ConnectEncode)
			if pk := r.read(); pk.FixedHeader.Type != packets.Connack {
				t.Fatalf("got packet type %d, want CONNACK", pk.FixedHeader.Type)
			}
			sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
				Filters: packets.Subscriptions{{Filter: "compat/t", Qos: 0}}}
			r.send(sub, (*packets.Packet).SubscribeEncode)
			if pk := r.read(); pk.FixedHeader.Type != packets.Suback {
				t.Fatalf("got packet type %d, want SUBACK", pk.FixedHeader.Type)
			}
			pub := newClient(t, pki, tcpURL(s), nil)
			if _, err := pub.Publish(context.Background(), "compat/t", []byte("x"), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
			pk := r.read()
			if pk.FixedHeader.Type != packets.Publish || pk.TopicName != "compat/t" {
				t.Fatalf("got %+v, want PUBLISH on compat/t", pk.FixedHeader)
			}
			var stamp string
			for _, u := range pk.Properties.User {
				if u.Key == TimeProperty {
					stamp = u.Val
				}
			}
			if stamp == "" {
				t.Fatalf("PUBLISH lost the %s user property: %+v", TimeProperty, pk.Properties.User)
			}
			if e := pk.Properties.MessageExpiryInterval; e != 0 {
				t.Fatalf("PUBLISH carries a message expiry interval of %d s the publisher did not set", e)
			}
		})
	}
}
