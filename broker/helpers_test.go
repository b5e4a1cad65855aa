package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// client is an HTTP/3 client for one test (one QUIC connection per host).
type client struct {
	t    testing.TB
	base string
	c    *http.Client
	hdr  http.Header
}

func newClient(t testing.TB, b *brokertest.Broker, cert *tls.Certificate) *client {
	t.Helper()
	c := testutil.H3Client(b.PKI.Pool(), cert)
	t.Cleanup(func() { c.Transport.(*http3.Transport).Close() })
	return &client{t: t, base: b.URL, c: c, hdr: http.Header{}}
}

// topicURL is the URL of a topic or filter by the one encoding rule of
// docs/pubsub.md: one percent-encoded path segment, or ?topic= for "." and "..".
func topicURL(base, topic, query string) string {
	if topic == "." || topic == ".." {
		u := base + "/v1/topics?topic=" + topic
		if query != "" {
			u += "&" + query
		}
		return u
	}
	u := base + "/v1/topics/" + url.PathEscape(topic)
	if query != "" {
		u += "?" + query
	}
	return u
}

// publish POSTs one message and returns the status, the Quiot-Seq and the body.
func (c *client) publish(topic string, payload []byte, query string, hdr ...string) (int, uint64, string) {
	c.t.Helper()
	u := topicURL(c.base, topic, query)
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(payload))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("publish %s: %v", topic, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	seq, _ := strconv.ParseUint(resp.Header.Get("Quiot-Seq"), 10, 64)
	return resp.StatusCode, seq, string(body)
}

// mustPublish publishes and fails the test unless the broker answers 204.
func (c *client) mustPublish(topic, payload string, query ...string) uint64 {
	c.t.Helper()
	q := ""
	if len(query) > 0 {
		q = query[0]
	}
	st, seq, body := c.publish(topic, []byte(payload), q)
	if st != http.StatusNoContent || seq == 0 {
		c.t.Fatalf("publish %s: status %d seq %d: %s", topic, st, seq, body)
	}
	return seq
}

// sub is an open subscription.
type sub struct {
	t      testing.TB
	resp   *http.Response
	cancel context.CancelFunc
	dec    *wire.Decoder
	sse    *wire.SSEReader
	epoch  uint64 // the Quiot-Epoch of the response
}

// subscribe GETs a filter; query may hold since=, count=; sse picks SSE.
func (c *client) subscribe(filter, query string, sse bool, hdr ...string) (*sub, int, string) {
	c.t.Helper()
	u := topicURL(c.base, filter, query)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	if sse {
		req.Header.Set("Accept", "text/event-stream")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		cancel()
		c.t.Fatalf("subscribe %s: %v", filter, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(body)
	}
	epoch, err := wire.ParseEpoch(resp.Header.Get("Quiot-Epoch"))
	if err != nil {
		resp.Body.Close()
		cancel()
		c.t.Fatalf("subscribe %s: %v", filter, err)
	}
	s := &sub{t: c.t, resp: resp, cancel: cancel, epoch: epoch}
	if sse {
		s.sse = wire.NewSSEReader(resp.Body)
	} else {
		s.dec = wire.NewDecoder(resp.Body, 0)
	}
	c.t.Cleanup(s.close)
	return s, http.StatusOK, ""
}

func (c *client) mustSubscribe(filter, query string, sse bool) *sub {
	c.t.Helper()
	s, st, body := c.subscribe(filter, query, sse)
	if st != http.StatusOK {
		c.t.Fatalf("subscribe %s: status %d: %s", filter, st, body)
	}
	return s
}

func (s *sub) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads one frame (10 s at most).
func (s *sub) next() (wire.Frame, error) {
	type res struct {
		f   wire.Frame
		err error
	}
	ch := make(chan res, 1)
	go func() {
		if s.sse != nil {
			ev, err := s.sse.Next()
			if err != nil {
				ch <- res{err: err}
				return
			}
			f, err := ev.Frame()
			if want := string(wire.AppendEventID(nil, s.epoch, f.Seq)); err == nil && ev.Event == "message" && ev.ID != want {
				err = fmt.Errorf("sse id %q, want %q (epoch-seq)", ev.ID, want)
			}
			ch <- res{f, err}
			return
		}
		f, err := s.dec.Frame()
		ch <- res{f, err}
	}()
	select {
	case r := <-ch:
		return r.f, r.err
	case <-time.After(10 * time.Second):
		s.close()
		return wire.Frame{}, errors.New("timeout waiting for a frame")
	}
}

func (s *sub) mustNext() wire.Frame {
	s.t.Helper()
	f, err := s.next()
	if err != nil {
		s.t.Fatalf("reading subscription: %v", err)
	}
	return f
}

// expect reads frames and checks their topics and payloads (and no gap).
func (s *sub) expect(pairs ...string) []wire.Frame {
	s.t.Helper()
	var out []wire.Frame
	for i := 0; i+1 < len(pairs); i += 2 {
		f := s.mustNext()
		if f.IsGap() || f.Topic != pairs[i] || string(f.Payload) != pairs[i+1] {
			s.t.Fatalf("frame %d: got %+v, want topic %q payload %q", i/2, f, pairs[i], pairs[i+1])
		}
		out = append(out, f)
	}
	return out
}
