package mqttquic

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestStalledSubscriberDoesNotBlockOthers: a QoS 1 subscriber that stops
// reading while its connection stays up holds up neither the publisher
// nor the other subscribers of the same topics. mochi handed out packet
// ids under the client's lock, which its writer held while blocked on the
// stalled connection: the publisher's delivery waited there, and with it
// everything the publisher sent (over QUIC after 18 messages of 32 KiB,
// the stream's flow-control window; over TCP after 121, the sockets'
// buffers).
func TestStalledSubscriberDoesNotBlockOthers(t *testing.T) {
	const n, size = 160, 32 << 10 // 5 MiB: beyond what the stalled connection absorbs
	for _, tr := range []string{"quic", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			b, _ := startSecure(t, aclFile, nil)
			stalled := mustConnect(t, b.mqtt, b.pki, tr, connectOpts{id: "stall-" + tr, user: "alice", pass: "tok-alice", clean: true})
			stalled.subscribe("a/#") // and never reads again
			reader := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "read-" + tr, user: "alice", pass: "tok-alice", clean: true})
			reader.subscribe("a/#")
			got := make(chan error, 1)
			go func() { got <- readAll(reader, n, size) }() // keeps the reader's queue short
			pub := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "pub-" + tr, user: "alice", pass: "tok-alice", clean: true})
			payload := strings.Repeat("x", size)
			for i := 0; i < n; i++ {
				if code, err := pub.publish("a/x", payload, 1, false); err != nil || code != 0 {
					t.Fatalf("publish %d: 0x%02x %v", i, code, err)
				}
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			_ = stalled.nc.Close()
		})
	}
}

// readAll reads n deliveries of size bytes from c and acknowledges them
// (without c's test helpers, which may not fail the test from another
// goroutine).
func readAll(c *rawClient, n, size int) error {
	for i := 0; i < n; {
		pk, err := c.read(30 * time.Second)
		if err != nil {
			return fmt.Errorf("delivery %d of %d: %w", i+1, n, err)
		}
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		if len(pk.Payload) != size {
			return fmt.Errorf("delivery %d: %d bytes, want %d", i+1, len(pk.Payload), size)
		}
		var buf bytes.Buffer
		ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID, ProtocolVersion: c.v}
		if err := ack.PubackEncode(&buf); err != nil {
			return err
		}
		if _, err := c.nc.Write(buf.Bytes()); err != nil {
			return fmt.Errorf("acknowledging delivery %d: %w", i+1, err)
		}
		i++
	}
	return nil
}
