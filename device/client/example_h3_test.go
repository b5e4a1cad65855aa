package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/testutil"
)

// Example publishes to and subscribes from an HTTP/3 broker: here one
// started in-process on loopback with a throwaway certificate.
func Example() {
	dev, _ := certs.SelfSigned(nil, nil)
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", DisableTCP: true,
		Certificates: []tls.Certificate{dev.TLS}, Logger: testutil.DiscardLogger()})
	if err != nil || b.Start() != nil {
		fmt.Println("broker:", err)
		return
	}
	defer b.Close()
	roots := x509.NewCertPool()
	roots.AddCert(dev.TLS.Leaf)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.New(client.Options{
		Broker:    "https://" + b.Addr().String(),
		RootCAs:   roots,
		Reconnect: true, // back off and resume after network errors and 503
		Logger:    testutil.DiscardLogger(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// Subscribe runs until its context ends; WithSubscribed says when the
	// broker has accepted the subscription.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ready, got := make(chan struct{}), make(chan client.Message, 1)
	go c.Subscribe(client.WithSubscribed(sctx, func() { close(ready) }), "sensors/#", 0, func(m client.Message) { got <- m })
	<-ready

	ack, err := c.Publish(ctx, "sensors/kitchen/temp", []byte("21.5"), client.PublishOptions{QoS: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	m := <-got
	fmt.Printf("acknowledged as #%d; delivered %s %s (stamped: %v)\n", ack.Seq, m.Topic, m.Payload, !m.Sent.IsZero())
	// Output: acknowledged as #1; delivered sensors/kitchen/temp 21.5 (stamped: true)
}
