package client

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
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

// countingSessionCache counts the session tickets stored in it.
type countingSessionCache struct {
	tls.ClientSessionCache
	puts atomic.Int32
}

func (c *countingSessionCache) Put(k string, cs *tls.ClientSessionState) {
	if cs != nil { // crypto/tls puts nil to remove an entry
		c.puts.Add(1)
	}
	c.ClientSessionCache.Put(k, cs)
}

// awaitResumable waits until the broker's session ticket is in cache and
// its address-validation token in ts: both come after the handshake, in
// packets of their own, so a wake-up that closed before them would dial
// the next time without 0-RTT (and a test that holds the handshake back
// would hang on it).
func awaitResumable(ctx context.Context, t *testing.T, cache *countingSessionCache, ts *countingTokenStore) {
	t.Helper()
	for cache.puts.Load() == 0 || ts.puts.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("after the first connection: %d session tickets, %d tokens from the broker", cache.puts.Load(), ts.puts.Load())
		case <-time.After(10 * time.Millisecond): // polling the stores, not synchronising on time
		}
	}
}

func zeroRTTProfile() *quictune.Profile {
	p := quictune.Lean()
	p.Allow0RTT = true
	return p
}

// wakeClient is one wake-up of a device: a new client that shares the
// process's session cache and token store.
func wakeClient(t *testing.T, b *brokertest.Broker, cache tls.ClientSessionCache, ts quic.TokenStore, pc net.PacketConn) *h3Client {
	t.Helper()
	o := Options{
		Broker: b.URL, RootCAs: b.PKI.Pool(), Logger: testutil.DiscardLogger(),
		Tuning: zeroRTTProfile(), SessionCache: cache, TokenStore: ts, PacketConn: pc,
	}
	if g, ok := pc.(*earlyGate); ok {
		o.Tracer = g.tracer
	}
	c, err := New(o)
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
	b := brokertest.Start(t, nil, &broker.Options{Tuning: zeroRTTProfile()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cache := &countingSessionCache{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	ts := &countingTokenStore{TokenStore: quic.NewLRUTokenStore(4, 2)}

	first := wakeClient(t, b, cache, ts, nil)
	ack1, err := first.Publish(ctx, "dev/t", []byte("one"), PublishOptions{QoS: 1})
	if err != nil {
		t.Fatal(err)
	}
	if first.cur.qc.ConnectionState().Used0RTT {
		t.Fatal("first connection used 0-RTT without a ticket")
	}
	awaitResumable(ctx, t, cache, ts)
	_ = first.Close()

	// Incoming datagrams are held until the publish has gone out in 0-RTT
	// data, so the client cannot finish its handshake first.
	g := newEarlyGate(t)
	second := wakeClient(t, b, cache, ts, g)
	t.Cleanup(g.release)
	ack2, err := second.Publish(ctx, "dev/t", make([]byte, 300), PublishOptions{QoS: 1})
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

// earlyGate holds a client's incoming datagrams until released (so the
// client cannot finish its handshake: whatever it sends meanwhile goes in
// 0-RTT data) and can drop the client's Handshake packets (so the broker's
// handshake does not complete: every request it handles arrived in early
// data). With the gate's tracer on the client's connection it releases
// itself once the first request (stream 0) has been packed whole, FIN
// included, into 0-RTT packets: released any earlier, the rest of the
// request would go in 1-RTT packets that a broker without the client's
// Handshake never reads (a wait for the idle timeout, seen under load).
type earlyGate struct {
	net.PacketConn
	dropHandshake atomic.Bool
	hold          chan struct{}
	once          sync.Once
}

func newEarlyGate(t *testing.T) *earlyGate {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &earlyGate{PacketConn: pc, hold: make(chan struct{})}
	t.Cleanup(func() { g.release(); _ = pc.Close() })
	return g
}

func (g *earlyGate) release() { g.once.Do(func() { close(g.hold) }) }

// tracer is a quic.Config.Tracer that releases the gate when a 0-RTT
// packet carries the end (FIN) of stream 0.
func (g *earlyGate) tracer(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	return gateTrace{g}
}

type gateTrace struct{ g *earlyGate }

func (tr gateTrace) AddProducer() qlogwriter.Recorder { return tr }
func (tr gateTrace) Close() error                     { return nil }

func (tr gateTrace) RecordEvent(e qlogwriter.Event) {
	ps, ok := e.(qlog.PacketSent)
	if !ok || ps.Header.PacketType != qlog.PacketType0RTT {
		return
	}
	for _, f := range ps.Frames {
		if sf, ok := f.Frame.(*qlog.StreamFrame); ok && sf.StreamID == 0 && sf.Fin {
			tr.g.release()
		}
	}
}

// longType is the QUIC v1 long-header packet type of a datagram's first
// packet: 0 Initial, 1 0-RTT, 2 Handshake, 3 Retry; -1 for a short header.
func longType(p []byte) int {
	if len(p) == 0 || p[0]&0x80 == 0 {
		return -1
	}
	return int(p[0]&0x30) >> 4
}

// hasHandshakePacket reports whether a datagram holds a Handshake packet
// (alone, or coalesced behind an Initial one).
func hasHandshakePacket(p []byte) bool {
	for longType(p) >= 0 {
		typ := longType(p)
		if typ == 2 {
			return true
		}
		i := 5 // first byte, version
		if len(p) <= i {
			return false
		}
		i += 1 + int(p[i]) // destination connection ID
		if len(p) <= i {
			return false
		}
		i += 1 + int(p[i]) // source connection ID
		if typ == 0 {      // token
			tl, n, err := quicvarint.Parse(p[min(i, len(p)):])
			if err != nil {
				return false
			}
			i += n + int(tl)
		}
		l, n, err := quicvarint.Parse(p[min(i, len(p)):])
		if err != nil {
			return false
		}
		i += n + int(l)
		if i > len(p) {
			return false
		}
		p = p[i:]
	}
	return false
}

func (g *earlyGate) WriteTo(p []byte, a net.Addr) (int, error) {
	if g.dropHandshake.Load() && hasHandshakePacket(p) {
		return len(p), nil
	}
	return g.PacketConn.WriteTo(p, a)
}

func (g *earlyGate) ReadFrom(p []byte) (int, net.Addr, error) {
	<-g.hold
	return g.PacketConn.ReadFrom(p)
}

// TestH3ZeroRTTPublishAcceptance: in 0-RTT data (the broker's handshake
// held incomplete), a publish with a message id and a current time is
// accepted, one without an id is answered 425 and not published.
func TestH3ZeroRTTPublishAcceptance(t *testing.T) {
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
	held := 1 // messages the broker holds

	for _, tc := range []struct {
		name   string
		id     string
		status int
	}{
		{"with a message id", "m-1", http.StatusNoContent},
		{"without a message id", "", http.StatusTooEarly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newEarlyGate(t)
			g.dropHandshake.Store(true)
			c := wakeClient(t, b, cache, ts, g)
			t.Cleanup(g.release) // before the client's Close (cleanups run last first)
			hc, err := c.conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			str, err := hc.cc.OpenRequestStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+"/v1/topics/dev%2Ft", nil)
			req.Header.Set(wire.HeaderTime, strconv.FormatInt(time.Now().UnixNano(), 10))
			req.Header.Set(wire.HeaderPayload, "eA")
			if tc.id != "" {
				req.Header.Set(wire.HeaderMsgID, tc.id)
			}
			if err := str.SendRequestHeader(req); err != nil {
				t.Fatal(err)
			}
			_ = str.Close() // the gate opens once the request went out whole in 0-RTT data
			resp, err := str.ReadResponse()
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("answer %d %q, want %d", resp.StatusCode, body, tc.status)
			}
			if !hc.qc.ConnectionState().Used0RTT {
				t.Fatal("the request did not go in 0-RTT data")
			}
			if tc.status/100 == 2 {
				held++
			}
			if n := b.Stats().HistoryMessages; n != held {
				t.Fatalf("broker holds %d messages, want %d", n, held)
			}
		})
	}
}

// TestH3FileSessionCacheAcrossProcesses: a session kept in a file is
// resumed by a client of a new cache read from that file (a new process),
// which then publishes in 0-RTT data.
func TestH3FileSessionCacheAcrossProcesses(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Tuning: zeroRTTProfile()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	file := t.TempDir() + "/session.json"

	first := wakeClient(t, b, NewFileSessionCache(file, testutil.DiscardLogger()), nil, nil)
	if _, err := first.Publish(ctx, "dev/t", []byte("one"), PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	// The ticket comes after the handshake, with the first answers.
	for {
		if st, err := os.Stat(file); err == nil {
			if st.Mode().Perm() != 0o600 {
				t.Fatalf("session file mode %v, want 0600", st.Mode().Perm())
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no session file written")
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = first.Close()

	second := wakeClient(t, b, NewFileSessionCache(file, testutil.DiscardLogger()), nil, nil)
	if _, err := second.Publish(ctx, "dev/t", []byte("two"), PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	cs := second.cur.qc.ConnectionState()
	if !cs.TLS.DidResume || !cs.Used0RTT {
		t.Fatalf("resumed %v, 0-RTT %v: want both", cs.TLS.DidResume, cs.Used0RTT)
	}
}

func TestFileSessionCacheBadFile(t *testing.T) {
	file := t.TempDir() + "/session.json"
	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewFileSessionCache(file, testutil.DiscardLogger())
	if _, ok := c.Get("x"); ok {
		t.Fatal("entry from a bad file")
	}
}
