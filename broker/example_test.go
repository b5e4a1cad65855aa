package broker_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/certs"
)

// A broker on a loopback port with a throwaway certificate; a message
// published from Go (as the MQTT bridge does) is counted and retained.
func Example() {
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		panic(err)
	}
	b, err := broker.New(&broker.Options{
		Listen:       "127.0.0.1:0",
		Certificates: []tls.Certificate{cert.TLS},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	if err := b.Start(); err != nil {
		panic(err)
	}
	defer b.Close()
	b.AddTap(func(m *broker.Message) { fmt.Println("tap:", m.Origin, m.Topic, m.Seq) })
	seq, err := b.Publish(context.Background(), broker.Message{Topic: "greeting", Payload: []byte("hi"), Retain: true, Origin: "mqtt"})
	fmt.Println(seq, err, b.Stats().Protocols["mqtt"].MessagesIn)
	// Output:
	// tap: mqtt greeting 1
	// 1 <nil> 1
}
