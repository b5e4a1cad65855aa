package client_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// subscribeBreaker is a TCP relay in front of an MQTT broker that breaks
// the first connection when the client's first SUBSCRIBE arrives (the
// broker never sees it, the client never gets a SUBACK); later connections
// pass through untouched.
type subscribeBreaker struct {
	ln    net.Listener
	conns atomic.Int32
	broke atomic.Bool

	mu   sync.Mutex
	open []net.Conn // closed with the relay
}

// keep records c to be closed with the relay; false once it is closed.
func (r *subscribeBreaker) keep(c ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		return false
	}
	r.open = append(r.open, c...)
	return true
}

func newSubscribeBreaker(t *testing.T, upstream string) *subscribeBreaker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &subscribeBreaker{ln: ln, open: []net.Conn{}}
	t.Cleanup(func() {
		_ = ln.Close()
		r.mu.Lock()
		for _, c := range r.open {
			_ = c.Close()
		}
		r.open = nil
		r.mu.Unlock()
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = down.Close()
				continue
			}
			if !r.keep(down, up) {
				_ = down.Close()
				_ = up.Close()
				return
			}
			first := r.conns.Add(1) == 1
			go func() { _, _ = io.Copy(down, up); _ = down.Close() }()
			go func() {
				defer func() { _ = up.Close(); _ = down.Close() }()
				for {
					cp, err := packets.ReadPacket(down)
					if err != nil {
						return
					}
					if first && cp.Type == packets.SUBSCRIBE {
						r.broke.Store(true)
						return // drop it and break both sides
					}
					if _, err := cp.WriteTo(up); err != nil {
						return
					}
				}
			}()
		}
	}()
	return r
}

// TestMQTTSubscribeRetriedAfterBreak: a SUBSCRIBE whose connection breaks
// before the SUBACK is sent again on the next connection, and the
// subscription then works. paho keeps such a request in a persistent
// session but never resends it (MQTT resends only PUBLISH and PUBREL);
// the client used to wait for its SUBACK for ever.
func TestMQTTSubscribeRetriedAfterBreak(t *testing.T) {
	pki := testutil.NewPKI(t)
	s := startMQTT(t, pki, func(o *mqttquic.Options) { o.TCPAddr = "127.0.0.1:0" })
	relay := newSubscribeBreaker(t, s.TCPAddr())

	sub, err := client.New(client.Options{Broker: "mqtt://" + relay.ln.Addr().String(), ClientID: "sub-break", Reconnect: true, MaxBackoff: 100 * time.Millisecond, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	got := make(chan client.Message, 16)
	subErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { subErr <- sub.Subscribe(ctx, "brk/#", 0, func(m client.Message) { got <- m }) }()

	pub, err := client.New(client.Options{Broker: "mqtt://" + s.TCPAddr(), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	// Publish until the subscriber has the message (the subscription is
	// live once one arrives); a bound that only catches a hang.
	deadline := time.After(60 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := pub.Publish(pctx, "brk/x", []byte("x"), client.PublishOptions{QoS: 1})
		pcancel()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m.Topic != "brk/x" {
				t.Fatalf("got %q", m.Topic)
			}
			if !relay.broke.Load() || relay.conns.Load() < 2 {
				t.Fatalf("delivered without the break (broke %v, %d connections)", relay.broke.Load(), relay.conns.Load())
			}
			return
		case err := <-subErr:
			t.Fatalf("Subscribe returned %v", err)
		case <-deadline:
			t.Fatalf("no message within 60 s (relay broke the first SUBSCRIBE: %v, %d connections): the SUBSCRIBE was not sent again", relay.broke.Load(), relay.conns.Load())
		case <-time.After(50 * time.Millisecond): // publish again until the subscription is live
		}
	}
}
