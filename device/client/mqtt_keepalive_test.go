package client_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// blackholeConn drops every datagram it is asked to send while down is
// set, as a path that loses everything for a while (a handover, a NAT
// rebinding that waits for the device's next datagram).
type blackholeConn struct {
	net.PacketConn
	down    atomic.Bool
	dropped atomic.Int64
}

func (c *blackholeConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.down.Load() {
		c.dropped.Add(1)
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

// TestMQTTQUICKeepAliveSurvivesSlowPath: a path that loses everything for
// three QUIC keep-alive periods does not end an MQTT over QUIC connection
// whose QUIC survives it. With the MQTT keep-alive equal to the 1 s QUIC
// keep-alive, paho's pinger gave up on the PINGRESP one period after its
// PINGREQ and the client reconnected (docs/TUNING.md, "MQTT keep-alive").
func TestMQTTQUICKeepAliveSurvivesSlowPath(t *testing.T) {
	pki := testutil.NewPKI(t)
	s := startMQTT(t, pki)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	pc := &blackholeConn{PacketConn: udp}
	p := quictune.Lean()
	p.KeepAlivePeriod = quictune.Duration(time.Second)
	c, err := client.New(client.Options{
		Broker:     "mqtt-quic://localhost:" + quicPort(s),
		RootCAs:    pki.Pool(),
		PacketConn: pc,
		Tuning:     p,
		Reconnect:  true,
		Logger:     testutil.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, "ka/x", []byte("before"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	pc.down.Store(true)
	// Three QUIC keep-alive periods: the outage the test is about.
	time.Sleep(3 * time.Second)
	pc.down.Store(false)
	if pc.dropped.Load() == 0 {
		t.Fatal("nothing was sent during the outage: the QUIC keep-alive is off")
	}
	if _, err := c.Publish(ctx, "ka/x", []byte("after"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	if r := c.Stats().Reconnects; r != 0 {
		t.Fatalf("%d reconnects after a 3 s outage of a QUIC connection with a 90 s idle timeout; want none", r)
	}
}
