package client_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// connackWithheld is an MQTT over QUIC broker of one connection that
// withholds its CONNACK until the packet after the CONNECT has come, and
// reports that packet's type (or why none came).
func connackWithheld(t *testing.T, pki *testutil.PKI) (addr string, next <-chan string) {
	t.Helper()
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}, NextProtos: []string{"mqtt"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	out := make(chan string, 1)
	go func() {
		out <- serveWithheld(ln)
	}()
	return ln.Addr().String(), out
}

func serveWithheld(ln *quic.Listener) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qc, err := ln.Accept(ctx)
	if err != nil {
		return fmt.Sprintf("accept: %v", err)
	}
	defer qc.CloseWithError(0, "")
	s, err := qc.AcceptStream(ctx)
	if err != nil {
		return fmt.Sprintf("accept stream: %v", err)
	}
	cp, err := packets.ReadPacket(s)
	if err != nil || cp.Type != packets.CONNECT {
		return fmt.Sprintf("first packet: %v %v", cp, err)
	}
	// A client that waits for the CONNACK sends nothing more: the read
	// ends at this deadline only in that (failing) case.
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	cp, err = packets.ReadPacket(s)
	if err != nil {
		return fmt.Sprintf("nothing after the CONNECT before the CONNACK: %v", err)
	}
	pub, ok := cp.Content.(*packets.Publish)
	if !ok {
		return fmt.Sprintf("packet after the CONNECT: type %d", cp.Type)
	}
	_ = s.SetReadDeadline(time.Time{})
	ca := packets.NewControlPacket(packets.CONNACK)
	pa := packets.NewControlPacket(packets.PUBACK)
	pa.Content.(*packets.Puback).PacketID = pub.PacketID
	for _, p := range []*packets.ControlPacket{ca, pa} {
		if _, err := p.WriteTo(s); err != nil {
			return fmt.Sprintf("write: %v", err)
		}
	}
	// Until the client has its PUBACK and goes.
	_, _ = s.Read(make([]byte, 1))
	return "PUBLISH"
}

// TestMQTTFirstPublishFollowsConnect: a QoS 1 publish that opens an MQTT
// over QUIC client's first connection goes right behind the CONNECT, with
// a full handshake too (no 0-RTT allowed, or no ticket yet), instead of
// waiting a round trip for the CONNACK: on NB-IoT that round trip put the
// PUBACK behind the handshake's probes on the downlink.
func TestMQTTFirstPublishFollowsConnect(t *testing.T) {
	no0RTT := quictune.Lean()
	no0RTT.Allow0RTT = false
	for _, tc := range []struct {
		name    string
		profile *quictune.Profile
	}{
		{"lean, no 0-RTT", no0RTT},
		{"lean (0-RTT allowed), no ticket", quictune.Lean()},
		{"default", quictune.Default()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := testutil.NewPKI(t)
			addr, next := connackWithheld(t, pki)
			c, err := client.New(client.Options{
				Broker: "mqtt-quic://" + addr, RootCAs: pki.Pool(), Tuning: tc.profile,
				Logger: testutil.DiscardLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := make(chan error, 1)
			go func() {
				_, err := c.Publish(ctx, "wake/up", []byte("hi"), client.PublishOptions{QoS: 1})
				res <- err
			}()
			if got := <-next; got != "PUBLISH" {
				t.Fatalf("the broker withholding its CONNACK got: %s", got)
			}
			if err := <-res; err != nil {
				t.Fatalf("publish: %v", err)
			}
		})
	}
}
