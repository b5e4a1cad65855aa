package client

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// earlyMQTTBroker is an MQTT over QUIC broker that takes 0-RTT: it answers
// each connection's CONNECT and first PUBLISH with a CONNACK and a PUBACK.
func earlyMQTTBroker(t *testing.T, pki *testutil.PKI) string {
	t.Helper()
	ln, err := quic.ListenAddrEarly("127.0.0.1:0",
		&tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}, NextProtos: []string{mqttALPN}},
		&quic.Config{Allow0RTT: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveEarlyMQTT(qc)
			}()
		}
	}()
	return ln.Addr().String()
}

func serveEarlyMQTT(qc *quic.Conn) {
	defer qc.CloseWithError(0, "")
	s, err := qc.AcceptStream(context.Background())
	if err != nil {
		return
	}
	for {
		cp, err := packets.ReadPacket(s)
		if err != nil {
			return
		}
		var reply *packets.ControlPacket
		switch p := cp.Content.(type) {
		case *packets.Connect:
			reply = packets.NewControlPacket(packets.CONNACK)
		case *packets.Publish:
			reply = packets.NewControlPacket(packets.PUBACK)
			reply.Content.(*packets.Puback).PacketID = p.PacketID
		case *packets.Pingreq:
			reply = packets.NewControlPacket(packets.PINGRESP)
		default:
			continue
		}
		if _, err := reply.WriteTo(s); err != nil {
			return
		}
	}
}

// firstReadConn is a client socket that reports the first datagram it
// reads (the broker's first flight), below the client's own wrappers.
type firstReadConn struct {
	net.PacketConn
	once sync.Once
	read chan struct{}
}

func (c *firstReadConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.once.Do(func() { close(c.read) })
	}
	return n, a, err
}

// TestMQTTEarlyStreamBeforeBrokerParameters: an MQTT over QUIC wake-up in
// 0-RTT opens its stream before quic-go reads the broker's transport
// parameters (quic-go issue 4303: it writes them unsynchronised with a
// stream opened in 0-RTT reading them). The dial is made to open its stream
// only after the broker's first datagram has reached the client's socket;
// the gate (zerortt_gate.go) holds that datagram back from quic-go until the
// stream is open, so the race detector finds nothing, and the wake-ups
// still go in 0-RTT.
func TestMQTTEarlyStreamBeforeBrokerParameters(t *testing.T) {
	pki := testutil.NewPKI(t)
	addr := earlyMQTTBroker(t, pki)
	prof := quictune.Lean()
	prof.Allow0RTT = true
	prof.HandshakeRTTFromSession = false // no hold from a session file: none here
	cache := tls.NewLRUClientSessionCache(4)

	var cur atomic.Pointer[firstReadConn]
	var early atomic.Int32
	testHookEarlyDialed = func() {
		early.Add(1)
		select {
		case <-cur.Load().read:
		case <-time.After(20 * time.Second):
			t.Error("the broker's first datagram did not reach the socket")
		}
	}
	t.Cleanup(func() { testHookEarlyDialed = nil })

	for i := range 4 {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		pc := &firstReadConn{PacketConn: udp, read: make(chan struct{})}
		cur.Store(pc)
		c, err := New(Options{Broker: "mqtt-quic://" + addr, RootCAs: pki.Pool(), Tuning: prof,
			SessionCache: cache, PacketConn: pc, Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = c.Publish(ctx, "wake/up", []byte("hi"), PublishOptions{QoS: 1})
		cancel()
		used := Used0RTT(c)
		_ = c.Close()
		_ = udp.Close()
		if err != nil {
			t.Fatalf("wake-up %d: %v", i, err)
		}
		if want := i > 0; used != want {
			t.Fatalf("wake-up %d: used 0-RTT %v, want %v", i, used, want)
		}
	}
	if n := early.Load(); n != 3 {
		t.Errorf("%d dials returned in 0-RTT, want 3", n)
	}
}

// TestH3EarlyStreamBeforeBrokerParameters is
// TestMQTTEarlyStreamBeforeBrokerParameters over HTTP/3: the 0-RTT publish's
// request stream, and http3's control stream, are open before quic-go reads
// the broker's transport parameters, though the dial lets the broker's
// first datagram reach the socket before the request stream is opened.
func TestH3EarlyStreamBeforeBrokerParameters(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Tuning: zeroRTTProfile()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cache := &countingSessionCache{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	ts := &countingTokenStore{TokenStore: quic.NewLRUTokenStore(4, 2)}

	first := wakeClient(t, b, cache, ts, nil)
	if _, err := first.Publish(ctx, "dev/t", []byte("one"), PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	awaitResumable(ctx, t, cache, ts)
	_ = first.Close()

	var early atomic.Int32
	for i := range 3 {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		pc := &firstReadConn{PacketConn: udp, read: make(chan struct{})}
		testHookEarlyDialed = func() {
			early.Add(1)
			select {
			case <-pc.read:
			case <-ctx.Done():
				t.Error("the broker's first datagram did not reach the socket")
			}
		}
		c := wakeClient(t, b, cache, ts, pc)
		_, err = c.Publish(ctx, "dev/t", []byte("again"), PublishOptions{QoS: 1})
		used := Used0RTT(c)
		_ = c.Close()
		_ = udp.Close()
		testHookEarlyDialed = nil
		if err != nil {
			t.Fatalf("wake-up %d: %v", i, err)
		}
		if !used {
			t.Fatalf("wake-up %d did not use 0-RTT", i)
		}
	}
	if n := early.Load(); n != 3 {
		t.Errorf("%d publishes went in 0-RTT, want 3", n)
	}
}
