package bridge

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// TestHTTP3MessageIDDedup: a message the bridge sends again (a publish cut
// by a lost connection) carries the same message id, and the upstream
// quiot publishes it once.
func TestHTTP3MessageIDDedup(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	edge := brokertest.Start(t, pki, nil)
	up := brokertest.Start(t, pki, nil)
	caFile := pki.CAFile(t)
	cs, err := Parse(fmt.Appendf(nil, "[[bridge]]\nname = \"peer\"\nurl = %q\nca_file = %q\nout = [\"t/#\"]\n", up.URL, caFile))
	if err != nil {
		t.Fatal(err)
	}
	br, err := New(edge.Broker, cs[0], testutil.DiscardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Close(ctx)

	c, err := client.New(client.Options{Broker: up.URL, RootCAs: pki.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan string, 16)
	ready := make(chan struct{})
	go func() {
		_ = c.Subscribe(client.WithSubscribed(ctx, func() { close(ready) }), "t/#", 0, func(m client.Message) { got <- string(m.Payload) })
	}()
	<-ready
	conn, _ := br.connection()
	for i, tc := range []struct {
		id      uint64
		payload string
	}{{7, "first"}, {7, "first"}, {8, "second"}} {
		if r, err := br.publishH3(conn, upMsg{id: tc.id, topic: "t/x", payload: []byte(tc.payload)}); r != upSent {
			t.Fatalf("publish %d: outcome %d (%v), want sent", i, r, err)
		}
	}
	for _, want := range []string{"first", "second"} {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("upstream subscriber got %q, want %q (the repeated publish twice?)", p, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s", want)
		}
	}
}
