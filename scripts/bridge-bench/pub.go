package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// publisher publishes QoS 1 messages on the edge's MQTT/TCP listener as a
// device would: one at a time, each until the edge acknowledges it
// (PUBACK), reconnecting (clean start) and sending it again when the
// connection is lost or the edge is away (killed and restarted). A message
// counts as accepted only once its PUBACK came with a success code.
type publisher struct {
	addr string
	conn net.Conn
	c    *paho.Client
	// retries counts publishes sent again after a failed attempt (the
	// edge may have had the first one: a duplicate of the publisher's).
	retries int
	// reconnects counts the connections made after the first.
	reconnects int
	connected  bool
}

func newPublisher(port int) *publisher {
	return &publisher{addr: fmt.Sprintf("127.0.0.1:%d", port)}
}

func (p *publisher) drop() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.c, p.conn = nil, nil
}

func (p *publisher) dial() error {
	conn, err := net.DialTimeout("tcp", p.addr, 2*time.Second)
	if err != nil {
		return fmt.Errorf("dial %s: %w", p.addr, err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: "bench-pub", PacketTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "bench-pub", CleanStart: true, KeepAlive: 60})
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("connect: %w", err)
	}
	if ca.ReasonCode >= 0x80 {
		_ = conn.Close()
		return fmt.Errorf("connect refused: reason 0x%02x", ca.ReasonCode)
	}
	if p.connected {
		p.reconnects++
	}
	p.connected = true
	p.c, p.conn = c, conn
	return nil
}

// publish sends payload on topic until the edge accepts it or until
// deadline; it reports whether the edge accepted it.
func (p *publisher) publish(topic string, payload []byte, deadline time.Time) bool {
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			p.retries++
		}
		if p.c == nil {
			if err := p.dial(); err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pr, err := p.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload})
		cancel()
		if err == nil && (pr == nil || pr.ReasonCode < 0x80) {
			return true
		}
		p.drop()
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

func (p *publisher) close() {
	if p.c != nil {
		_ = p.c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	}
	p.drop()
}
