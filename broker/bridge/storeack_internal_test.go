package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/broker/store"
	"github.com/quiot/quiot/internal/testutil"
)

// TestStoreBeforeAck: with store_dir, a QoS 1 publisher (MQTT PUBACK,
// HTTP/3 publish response) is acknowledged only once the bridge's store
// has the message, so a kill -9 of the edge after the acknowledgement
// cannot lose it; when the store fails to take it, the publish fails
// instead of being acknowledged. With and without the edge's own store
// (the acknowledgement then waits for its commit first).
func TestStoreBeforeAck(t *testing.T) {
	for _, path := range []string{"mqtt", "h3"} {
		for _, edgeStore := range []bool{false, true} {
			for _, tc := range []struct {
				name     string
				storeErr error // what the store's append returns
			}{
				{"stored", nil},
				{"store fails", errors.New("disk failed")},
			} {
				t.Run(fmt.Sprintf("%s/edge-store=%v/%s", path, edgeStore, tc.name), func(t *testing.T) {
					storeBeforeAck(t, path, edgeStore, tc.storeErr)
				})
			}
		}
	}
}

func storeBeforeAck(t *testing.T, path string, edgeStore bool, storeErr error) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts *broker.Options
	if edgeStore {
		st, err := store.Open(store.Options{Dir: t.TempDir(), Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() }) // after the broker's close
		opts = &broker.Options{Store: st}
	}
	edge := brokertest.Start(t, pki, opts)
	ms := mqtttest.Start(t, pki, mqttquic.Options{QUICAddr: "off", TCPAddr: "127.0.0.1:0", Broker: edge.Broker})
	br := storeBridge(t, edge.Broker, "")
	// The store's append waits for the test (a slow disk), then returns
	// storeErr or appends.
	entered := make(chan struct{}, 4)
	gate := make(chan error, 4)
	br.storeHook = func(*item) error {
		entered <- struct{}{}
		return <-gate
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = br.Close(cctx)
	}()

	var pub func() error
	switch path {
	case "mqtt":
		conn, err := net.Dial("tcp", ms.TCPAddr())
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn})
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: "ack-test", CleanStart: true, KeepAlive: 30}); err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect(&paho.Disconnect{})
		pub = func() error {
			pr, err := c.Publish(ctx, &paho.Publish{QoS: 1, Topic: "t/x", Payload: []byte("kept")})
			if err == nil && pr != nil && pr.ReasonCode >= 0x80 {
				err = fmt.Errorf("PUBACK reason 0x%02x", pr.ReasonCode)
			}
			return err
		}
	case "h3":
		hc := testutil.H3Client(pki.Pool(), nil)
		pub = func() error {
			resp, err := hc.Post(edge.URL+"/v1/topics/t/x", "text/plain", strings.NewReader("kept"))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				return fmt.Errorf("status %s", resp.Status)
			}
			return nil
		}
	}
	// acked carries the publish's outcome and the store's count when it
	// came.
	type ack struct {
		err    error
		stored uint64
	}
	acked := make(chan ack, 1)
	go func() {
		err := pub()
		acked <- ack{err, br.Stats().Stored}
	}()
	select {
	case <-entered:
	case a := <-acked:
		// Only before the store saw the message can the acknowledgement
		// come with its append still waiting.
		t.Fatalf("publish answered (error %v) with the store's append not even started; stored %d", a.err, a.stored)
	case <-ctx.Done():
		t.Fatal("the message never reached the store's append")
	}
	// The append is now held: the acknowledgement must not have come.
	select {
	case a := <-acked:
		gate <- storeErr
		t.Fatalf("publish answered (error %v) while the store's append was held; stored %d", a.err, a.stored)
	default:
	}
	gate <- storeErr
	var a ack
	select {
	case a = <-acked:
	case <-ctx.Done():
		t.Fatal("no answer to the publish once the store's append returned")
	}
	switch {
	case storeErr == nil && a.err != nil:
		t.Fatalf("publish failed although stored: %v", a.err)
	case storeErr == nil && a.stored != 1:
		t.Fatalf("publish acknowledged with %d messages in the store, want 1", a.stored)
	case storeErr != nil && a.err == nil:
		t.Fatalf("publish acknowledged although the store failed to take the message (stored %d)", a.stored)
	}
}

// TestStoreStalledBound: while the store's append is stalled, the held
// publishers are bounded by the memory queue (queue_messages): beyond it
// the oldest is dropped and its publisher gets an error, not an
// acknowledgement; the others are acknowledged once the store has them.
func TestStoreStalledBound(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	edge := brokertest.Start(t, pki, nil)
	br := storeBridge(t, edge.Broker, "queue_messages = 2\n")
	entered := make(chan struct{}, 4)
	stall := make(chan struct{})
	br.storeHook = func(*item) error {
		entered <- struct{}{}
		<-stall
		return nil
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = br.Close(cctx)
	}()
	results := make([]chan error, 3)
	pub := func(i int) {
		results[i] = make(chan error, 1)
		go func() {
			_, err := edge.Broker.Publish(ctx, broker.Message{Topic: "t/x", Payload: fmt.Appendf(nil, "m%d", i), QoS: 1, Origin: "test"})
			results[i] <- err
		}()
	}
	pub(0)
	select {
	case <-entered: // m0's append is stalled
	case err := <-results[0]:
		t.Fatalf("publish answered (%v) before the store's append", err)
	case <-ctx.Done():
		t.Fatal("m0 never reached the store's append")
	}
	// m1 and m2 fill the queue past 2: m0, the oldest, is dropped.
	pub(1)
	pub(2)
	select {
	case err := <-results[0]:
		if !errors.Is(err, errQueueFull) {
			t.Fatalf("the dropped message's publish: %v, want %v", err, errQueueFull)
		}
	case <-ctx.Done():
		t.Fatal("the dropped message's publisher was never answered")
	}
	close(stall)
	for i := 1; i < 3; i++ {
		select {
		case err := <-results[i]:
			if err != nil {
				t.Fatalf("publish m%d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("publish m%d never answered", i)
		}
	}
	if s := br.Stats(); s.Stored < 2 {
		t.Fatalf("stats %+v: m1 and m2 not in the store", s)
	}
}

// storeBridge makes (does not start) a bridge of b with a store, whose
// upstream never answers (a closed port): what the store takes stays in
// it. extra is more TOML lines of its table.
func storeBridge(tb testing.TB, b *broker.Broker, extra string) *Bridge {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	deadAddr := l.Addr().String()
	_ = l.Close()
	cs, err := Parse(fmt.Appendf(nil, "[[bridge]]\nname = \"cloud\"\nurl = \"mqtt://%s\"\nout = [\"t/#\"]\nstore_dir = %q\n%s", deadAddr, tb.TempDir(), extra))
	if err != nil {
		tb.Fatal(err)
	}
	br, err := New(b, cs[0], testutil.DiscardLogger())
	if err != nil {
		tb.Fatal(err)
	}
	return br
}
