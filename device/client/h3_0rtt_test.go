package client

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// countingTokenStore counts the tokens a connection found for its broker.
type countingTokenStore struct {
	quic.TokenStore
	puts, hits atomic.Int32
}

func (s *countingTokenStore) Put(k string, t *quic.ClientToken) {
	s.puts.Add(1)
	s.TokenStore.Put(k, t)
}

func (s *countingTokenStore) Pop(k string) *quic.ClientToken {
	t := s.TokenStore.Pop(k)
	if t != nil {
		s.hits.Add(1)
	}
	return t
}

func zeroRTTProfile() *quictune.Profile {
	p := quictune.Lean()
	p.Allow0RTT = true
	return p
}

// wakeClient is one wake-up of a device: a new client that shares the
// process's session cache and token store.
func wakeClient(t *testing.T, b *testutil.Broker, cache tls.ClientSessionCache, ts quic.TokenStore) *h3Client {
	t.Helper()
	c, err := New(Options{
		Broker: b.URL, RootCAs: b.PKI.Pool(), Logger: testutil.DiscardLogger(),
		Profile: zeroRTTProfile(), SessionCache: cache, TokenStore: ts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*h3Client)
}

// TestH3ZeroRTTPublishWithMsgID: the second wake-up resumes the session,
// presents the broker's token and publishes in 0-RTT data; the broker takes
// it (it carries a message id) and holds it once.
func TestH3ZeroRTTPublishWithMsgID(t *testing.T) {
	b := testutil.StartBroker(t, nil, &broker.Options{Tuning: zeroRTTProfile()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cache := tls.NewLRUClientSessionCache(4)
	ts := &countingTokenStore{TokenStore: quic.NewLRUTokenStore(4, 2)}

	first := wakeClient(t, b, cache, ts)
	ack1, err := first.Publish(ctx, "dev/t", []byte("one"), PublishOptions{QoS: 1})
	if err != nil {
		t.Fatal(err)
	}
	if first.cur.qc.ConnectionState().Used0RTT {
		t.Fatal("first connection used 0-RTT without a ticket")
	}
	// The ticket and the token come after the handshake: wait for both.
	for ts.puts.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no NEW_TOKEN from the broker")
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = first.Close()

	second := wakeClient(t, b, cache, ts)
	ack2, err := second.Publish(ctx, "dev/t", []byte("two"), PublishOptions{QoS: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !second.cur.qc.ConnectionState().Used0RTT {
		t.Fatal("second connection did not use 0-RTT")
	}
	if ts.hits.Load() != 1 {
		t.Fatalf("token store hits %d, want 1 (the second connection presents the first's token)", ts.hits.Load())
	}
	if ack2.Seq <= ack1.Seq {
		t.Fatalf("acks %d then %d", ack1.Seq, ack2.Seq)
	}
	if n := b.Stats().HistoryMessages; n != 2 {
		t.Fatalf("broker holds %d messages, want 2", n)
	}
}

// TestH3ZeroRTTPublishWithoutMsgIDRefused: a publish in 0-RTT data without a
// message id is answered 425.
func TestH3ZeroRTTPublishWithoutMsgIDRefused(t *testing.T) {
	b := testutil.StartBroker(t, nil, &broker.Options{Tuning: zeroRTTProfile()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cache := tls.NewLRUClientSessionCache(4)
	ts := quic.NewLRUTokenStore(4, 2)
	first := wakeClient(t, b, cache, ts)
	if _, err := first.Publish(ctx, "dev/t", []byte("one"), PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	_ = first.Close()

	second := wakeClient(t, b, cache, ts)
	hc, err := second.conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if handshakeDone(hc.qc) {
		t.Skip("the handshake completed before the request could go in 0-RTT data (no ticket?)")
	}
	str, err := hc.cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+"/v1/topics/dev%2Ft", nil)
	req.Header.Set(headerTime, strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := str.SendRequestHeader(req); err != nil {
		t.Fatal(err)
	}
	_ = str.Close()
	resp, err := str.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooEarly {
		t.Fatalf("answer %d %q, want 425", resp.StatusCode, body)
	}
	if !hc.qc.ConnectionState().Used0RTT {
		t.Fatal("the request did not go in 0-RTT data")
	}
	if n := b.Stats().HistoryMessages; n != 1 {
		t.Fatalf("broker holds %d messages, want 1", n)
	}
}
