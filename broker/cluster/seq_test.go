package cluster_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// TestResumeOnAnotherBroker: with cluster-wide sequence numbers (the
// default) every broker tells subscribers the same epoch; a subscriber reads
// messages published on b1 (HTTP/3) and b3 (MQTT) from b1, disconnects,
// more are published on b2 and b3, and it resumes on b2 with its last
// sequence number and b1's epoch: it gets every later message once, in
// order, with no gap announcement. An MQTT subscriber on b2 gets them too.
func TestResumeOnAnotherBroker(t *testing.T) {
	t.Parallel()
	_, n := threeBrokers(t, nil)
	e := n[0].b.Broker.Epoch()
	for i, x := range n {
		if got := x.b.Broker.Epoch(); got != e || got != x.link.Stats().Epoch {
			t.Fatalf("b%d epoch %x, b1 %x, link %x: want one cluster epoch", i+1, got, e, x.link.Stats().Epoch)
		}
	}
	m3 := n[2].mqttConnect("m3pub")
	m2 := n[1].mqttConnect("m2sub")
	m2.subscribe("r/#")
	// The SUBACK comes once the stream consumer reads the filter
	// (TestMQTTSubscribeCoversFilter); this waits on the consumer itself.
	waitFor(t, func() bool { return n[1].link.Stats().Subjects == 2 }, "b2's consumer to read r and r.>")
	s1 := n[0].subscribe("r/#", "")
	if s1.epoch != e {
		t.Fatalf("subscribe response epoch %x, want the cluster's %x", s1.epoch, e)
	}
	const first, later = 20, 20
	for i := range first {
		if i%2 == 0 {
			if seq := n[0].publish("r/a", fmt.Sprintf("m%d", i), "qos=1"); seq == 0 {
				t.Fatalf("QoS 1 publish answered without the cluster's sequence number")
			}
		} else {
			m3.publish("r/b", fmt.Sprintf("m%d", i), false)
		}
	}
	seen := map[string]bool{}
	var last uint64
	for len(seen) < first {
		f := s1.next()
		if f.IsGap() {
			t.Fatalf("gap on b1: %+v", f)
		}
		if f.Seq <= last || seen[string(f.Payload)] {
			t.Fatalf("b1 delivered %q seq %d after seq %d (seen: %v)", f.Payload, f.Seq, last, seen[string(f.Payload)])
		}
		last = f.Seq
		seen[string(f.Payload)] = true
	}
	s1.cancel()
	for i := first; i < first+later; i++ {
		if i%2 == 0 {
			n[1].publish("r/a", fmt.Sprintf("m%d", i), "qos=1")
		} else {
			m3.publish("r/b", fmt.Sprintf("m%d", i), false)
		}
	}
	r := n[1].subscribe("r/#", fmt.Sprintf("since=%d&epoch=%s", last, wire.FormatEpoch(s1.epoch)))
	if r.epoch != e {
		t.Fatalf("b2 epoch %x, want %x", r.epoch, e)
	}
	got := map[string]bool{}
	prev := last
	lastA, lastB := -1, -1
	for len(got) < later {
		f := r.next()
		if f.IsGap() {
			g, _ := f.Gap()
			t.Fatalf("resume on b2 after seq %d announced a gap %+v", last, g)
		}
		p := string(f.Payload)
		if f.Seq <= prev || got[p] || seen[p] {
			t.Fatalf("resume on b2: %q seq %d after seq %d (again: %v)", p, f.Seq, prev, got[p] || seen[p])
		}
		var i int
		if _, err := fmt.Sscanf(p, "m%d", &i); err != nil || i < first {
			t.Fatalf("resume on b2: unexpected %q", p)
		}
		// Each publisher's messages in its order.
		if f.Topic == "r/a" && i < lastA || f.Topic == "r/b" && i < lastB {
			t.Fatalf("resume on b2: %q out of its publisher's order", p)
		}
		if f.Topic == "r/a" {
			lastA = i
		} else {
			lastB = i
		}
		prev = f.Seq
		got[p] = true
	}
	// The MQTT subscriber on b2 got all 40, once.
	mg := map[string]bool{}
	for len(mg) < first+later {
		p := m2.next()
		if mg[string(p.Payload)] {
			t.Fatalf("MQTT on b2: %q twice", p.Payload)
		}
		mg[string(p.Payload)] = true
	}
	// The same resume point on b3 gives the same messages under the same numbers.
	r3 := n[2].subscribe("r/#", fmt.Sprintf("since=%d&epoch=%s", last, wire.FormatEpoch(e)))
	for range later {
		f := r3.next()
		if f.IsGap() || !got[string(f.Payload)] {
			t.Fatalf("resume on b3: %+v", f)
		}
	}
}

// TestSequencedHoldAndGaps: with cluster-wide numbers, messages a broker
// accepts while NATS is unreachable wait (bounded) for their number; those
// dropped at the bound are announced as a gap on their topic to the
// subscribers of that broker at once and, once NATS is back, to those of
// the other brokers: never silently lost. The held ones arrive everywhere
// in order, once. The gap note reaches the other brokers before the held
// messages also when its first announcements fail (as one may right after
// NATS restarts): it is announced again before anything held is sent.
func TestSequencedHoldAndGaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fails     int32 // gap announcements made to fail first
		coreFirst bool  // b takes the note's live copy first and is held there
	}{
		{"announced", 0, false},
		{"announcement fails twice", 2, false},
		{"live copy of the note first", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testSequencedHoldAndGaps(t, tc.fails, tc.coreFirst) })
	}
}

// holdCoreGap makes b's link take a gap note's live copy (core NATS)
// before the stream's and holds that path, once it has taken the note,
// until firstRead is closed: b's stream consumer must not deliver the
// origin's later messages before b's subscribers are told of the gap
// (a fresh-clone make test saw m3 first). The stream's copy waits until
// the live one was taken or ignored.
func holdCoreGap(t *testing.T, l *cluster.Link, firstRead <-chan struct{}) {
	coreDone := make(chan struct{})
	var once sync.Once
	cluster.SetRemoteGapHook(l, func(op, via string) {
		switch {
		case via == "core" && op == "remote-gap-ignored":
			once.Do(func() { close(coreDone) })
		case via == "core" && op == "remote-gap":
			once.Do(func() { close(coreDone) })
			select {
			case <-firstRead:
			case <-time.After(timeout): // bounds a hang only
			}
		case via == "stream" && op == "remote-gap-enter":
			select {
			case <-coreDone:
			case <-time.After(timeout):
				t.Errorf("b's live copy of the gap note never came")
			}
		}
	})
}

func testSequencedHoldAndGaps(t *testing.T, fails int32, coreFirst bool) {
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	mod := func(_ *broker.Options, co *cluster.Options) {
		co.Replicas = 1
		co.HoldMessages = 5
		co.ReconnectWait = 20 * time.Millisecond
		co.MaxReconnectWait = 100 * time.Millisecond
	}
	a := startNode(t, pki, "a", nc.urls(), mod)
	b := startNode(t, pki, "b", nc.urls(), mod)
	sa := a.subscribe("u/#", "")
	sb := b.subscribe("u/#", "")
	a.publish("u/probe", "probe", "qos=1")
	for _, s := range []*h3sub{sa, sb} {
		if p := string(s.nextMessage().Payload); p != "probe" {
			t.Fatalf("before the cut: %q", p)
		}
	}

	nc.nodes[0].Shutdown()
	nc.nodes[0].WaitForShutdown()
	waitFor(t, func() bool { return !a.link.Stats().Connected }, "link down")
	for i := range 8 {
		if seq := a.publish("u/x", fmt.Sprintf("m%d", i), "qos=1"); seq != 0 {
			t.Fatalf("a message held for its number was answered with seq %d", seq)
		}
	}
	// The 3 dropped at the hold bound: announced to a's subscriber now.
	f := sa.next()
	if g, err := f.Gap(); err != nil || g.Topic != "u/x" || g.From != 0 || g.To != 0 {
		t.Fatalf("a's subscriber while NATS is down: %+v, want a gap on u/x without numbers", f)
	}
	if st := a.link.Stats(); st.Held != 5 || st.Dropped != 3 {
		t.Fatalf("held %d dropped %d, want 5 and 3", st.Held, st.Dropped)
	}

	var tries atomic.Int32
	cluster.SetGapFault(a.link, func(topics string) error {
		if coreFirst && tries.Load() == 0 {
			// b's live copy of the note needs b's NATS subscription back.
			waitFor(t, func() bool { return b.link.Stats().Connected }, "b's link back")
		}
		if topics == "u/x" && tries.Add(1) <= fails {
			return errors.New("no response from stream")
		}
		return nil
	})
	firstRead := make(chan struct{})
	if coreFirst {
		holdCoreGap(t, b.link, firstRead)
	}
	nc.restart(0)
	// b: the gap note from a (through the stream), then m3..m7 in order.
	f = sb.next()
	close(firstRead)
	if g, err := f.Gap(); err != nil || g.Topic != "u/x" {
		t.Fatalf("b's subscriber after NATS is back: %+v, want a's gap on u/x", f)
	}
	for _, s := range []*h3sub{sa, sb} {
		var prev uint64
		for i := 3; i < 8; i++ {
			f := s.next()
			for g, err := f.Gap(); err == nil && g.Topic == "u/x" && g.From == 0 && g.To == 0; g, err = f.Gap() {
				f = s.next() // each drop may be announced on its own
			}
			if f.IsGap() || string(f.Payload) != fmt.Sprintf("m%d", i) || f.Seq <= prev {
				t.Fatalf("after NATS is back: %+v (payload %q), want m%d after seq %d", f, f.Payload, i, prev)
			}
			prev = f.Seq
		}
	}
	if st := b.link.Stats(); st.RemoteGaps != 1 {
		t.Fatalf("b counted %d remote gaps, want 1", st.RemoteGaps)
	}
	if n := tries.Load(); n != fails+1 {
		t.Errorf("%d gap announcements, want %d (%d failed, then announced)", n, fails+1, fails)
	}
	if h := a.healthz(); !strings.Contains(h, "cluster: connected") {
		t.Fatalf("healthz: %q", h)
	}
}

// TestNKeyCredentials: a broker authenticates to NATS with an nkey seed
// file (--cluster-nkey); a wrong seed is refused by the server and the
// link stays down (local service goes on) instead of failing the broker.
func TestNKeyCredentials(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.nk"), filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(good, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30, StoreDir: t.TempDir(),
		Nkeys: []*server.NkeyUser{{Nkey: pub}}}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(timeout) {
		t.Fatal("nats not ready")
	}
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "nk1", s.ClientURL(), func(_ *broker.Options, co *cluster.Options) { co.Replicas, co.NKeySeedFile = 1, good })
	b := startNode(t, pki, "nk2", s.ClientURL(), func(_ *broker.Options, co *cluster.Options) { co.Replicas, co.NKeySeedFile = 1, good })
	sb := b.subscribe("n/#", "")
	a.publish("n/1", "hello", "qos=1")
	if p := string(sb.nextMessage().Payload); p != "hello" {
		t.Fatalf("got %q", p)
	}

	// A seed the server does not know: refused, the broker serves alone.
	l, err := cluster.New(cluster.Options{URLs: s.ClientURL(), Name: "nk3", Replicas: 1, NKeySeedFile: bad, Logger: testutil.DiscardLogger(),
		ReconnectWait: 20 * time.Millisecond, MaxReconnectWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.Start(t, pki, &broker.Options{Cluster: l})
	if err := l.Start(c.Broker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	opt, err := nats.NkeyOptionFromSeed(bad)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, s.ClientURL(), opt)
	if st := l.Stats(); st.Connected {
		t.Fatalf("the link with an unknown nkey is connected: %+v", st)
	}
	// A seed file that cannot be read stops the start with a clear error.
	l2, err := cluster.New(cluster.Options{URLs: s.ClientURL(), Replicas: 1, NKeySeedFile: filepath.Join(dir, "missing.nk"), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c2 := brokertest.Start(t, pki, &broker.Options{Cluster: l2})
	if err := l2.Start(c2.Broker); err == nil || !strings.Contains(err.Error(), "nkey seed") {
		_ = l2.Close()
		t.Fatalf("a missing nkey seed file: %v, want an error naming the seed", err)
	}
}

// refused checks that the NATS server at url refuses a client with opt
// (an authorization violation), as it refuses the link using the same
// credentials.
func refused(t *testing.T, url string, opt nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, opt, nats.Timeout(timeout))
	if err == nil {
		nc.Close()
		t.Fatal("the server let in a client with the wrong credentials")
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("wrong credentials: %v, want an authorization violation", err)
	}
}

// TestCredsFile: a broker authenticates with a NATS .creds file (a user JWT
// signed by its account and the user's nkey seed) against a server in
// operator (JWT) mode whose account has JetStream: cross-broker delivery
// works; a user of an account the operator does not know is refused.
func TestCredsFile(t *testing.T) {
	t.Parallel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	account := func(js bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		tok, err := ac.Encode(okp)
		must(err)
		return kp, pub, tok
	}
	_, sysPub, sysJWT := account(false)
	akp, aPub, aJWT := account(true)
	ukp, _, _ := account(false) // an account unknown to the server
	oc.SystemAccount = sysPub
	ojwt, err := oc.Encode(okp)
	must(err)
	oclaims, err := jwt.DecodeOperatorClaims(ojwt)
	must(err)
	res := &server.MemAccResolver{}
	must(res.Store(sysPub, sysJWT))
	must(res.Store(aPub, aJWT))
	dir := t.TempDir()
	creds := func(name string, issuer nkeys.KeyPair) string {
		u, err := nkeys.CreateUser()
		must(err)
		upub, _ := u.PublicKey()
		uc := jwt.NewUserClaims(upub)
		ujwt, err := uc.Encode(issuer)
		must(err)
		seed, _ := u.Seed()
		b, err := jwt.FormatUserConfig(ujwt, seed)
		must(err)
		p := filepath.Join(dir, name+".creds")
		must(os.WriteFile(p, b, 0o600))
		return p
	}
	good, bad := creds("edge", akp), creds("stranger", ukp)
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30, StoreDir: t.TempDir(),
		TrustedOperators: []*jwt.OperatorClaims{oclaims}, SystemAccount: sysPub, AccountResolver: res}
	s, err := server.NewServer(o)
	must(err)
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(timeout) {
		t.Fatal("nats not ready")
	}
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "c1", s.ClientURL(), func(_ *broker.Options, co *cluster.Options) { co.Replicas, co.CredsFile = 1, good })
	b := startNode(t, pki, "c2", s.ClientURL(), func(_ *broker.Options, co *cluster.Options) { co.Replicas, co.CredsFile = 1, good })
	sb := b.subscribe("c/#", "")
	a.publish("c/1", "hello", "qos=1")
	if p := string(sb.nextMessage().Payload); p != "hello" {
		t.Fatalf("got %q", p)
	}

	l, err := cluster.New(cluster.Options{URLs: s.ClientURL(), Name: "c3", Replicas: 1, CredsFile: bad, Logger: testutil.DiscardLogger(),
		ReconnectWait: 20 * time.Millisecond, MaxReconnectWait: 200 * time.Millisecond})
	must(err)
	c := brokertest.Start(t, pki, &broker.Options{Cluster: l})
	must(l.Start(c.Broker))
	t.Cleanup(func() { _ = l.Close() })
	refused(t, s.ClientURL(), nats.UserCredentials(bad))
	if st := l.Stats(); st.Connected {
		t.Fatalf("the link of a user of an unknown account is connected: %+v", st)
	}
}

// TestLateBrokerHistory: a broker that joins later reads the stream from its
// start, so a subscriber resumes on it with no gap from a point it never
// saw; where the stream no longer holds messages (its per-topic bound), the
// resume is told of the gap, never silently.
func TestLateBrokerHistory(t *testing.T) {
	t.Parallel()
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	mod := func(bo *broker.Options, co *cluster.Options) {
		co.Replicas = 1
		bo.Limits.HistoryPerTopic = 5 // the stream keeps 5 messages per topic too
	}
	a := startNode(t, pki, "a", nc.urls(), mod)
	var seqs []uint64
	for i := range 4 {
		seqs = append(seqs, a.publish("h/kept", fmt.Sprintf("k%d", i), "qos=1"))
	}
	for i := range 12 {
		a.publish("h/busy", fmt.Sprintf("b%d", i), "qos=1") // the first 7 leave the stream
	}
	b := startNode(t, pki, "b", nc.urls(), mod)
	waitFor(t, func() bool { return b.b.Broker.Stats().LastSeq >= a.b.Broker.Stats().LastSeq }, "b read the stream")

	// From after k0 on h/kept: k1..k3 with a's numbers, no gap.
	r := b.subscribe("h/kept", fmt.Sprintf("since=%d&epoch=%s", seqs[0], wire.FormatEpoch(a.b.Broker.Epoch())))
	for i := 1; i < 4; i++ {
		f := r.next()
		if f.IsGap() || string(f.Payload) != fmt.Sprintf("k%d", i) || f.Seq != seqs[i] {
			t.Fatalf("resume on the late broker: %+v (payload %q), want k%d seq %d", f, f.Payload, i, seqs[i])
		}
	}
	// From the start on h/#: the 7 messages the stream dropped are announced
	// before what it holds.
	r2 := b.subscribe("h/#", fmt.Sprintf("since=1&epoch=%s", wire.FormatEpoch(a.b.Broker.Epoch())))
	f := r2.next()
	if !f.IsGap() {
		t.Fatalf("resume from before what the stream holds: first frame %+v (payload %q), want a gap", f, f.Payload)
	}
	got := map[string]bool{}
	for len(got) < 3+5 {
		f := r2.next()
		if f.IsGap() {
			continue
		}
		got[string(f.Payload)] = true
	}
	for i := 7; i < 12; i++ {
		if !got[fmt.Sprintf("b%d", i)] {
			t.Fatalf("b%d missing after the gap: %v", i, got)
		}
	}
}

// TestPublishingBrokerDies: a broker closes right after its publishers'
// QoS 1 messages were acknowledged (the acknowledgement waited for
// JetStream): every one reaches the other brokers' subscribers, once, in
// order, though their broker is gone.
func TestPublishingBrokerDies(t *testing.T) {
	t.Parallel()
	_, n := threeBrokers(t, nil)
	s1 := n[0].subscribe("d/#", "")
	m2 := n[1].mqttConnect("m2")
	m2.subscribe("d/#")
	// The SUBACK comes once the stream consumer reads the filter
	// (TestMQTTSubscribeCoversFilter); this waits on the consumer itself.
	waitFor(t, func() bool { return n[1].link.Stats().Subjects == 2 }, "b2's consumer to read d and d.>")
	const count = 50
	for i := range count {
		n[2].publish("d/x", fmt.Sprintf("m%d", i), "qos=1")
	}
	_ = n[2].link.Close()
	_ = n[2].b.Close()
	var last uint64
	for i := range count {
		f := s1.next()
		if f.IsGap() || string(f.Payload) != fmt.Sprintf("m%d", i) || f.Seq <= last {
			t.Fatalf("b1 after b3 died: %+v (payload %q), want m%d after seq %d", f, f.Payload, i, last)
		}
		last = f.Seq
	}
	for i := range count {
		if p := string(m2.next().Payload); p != fmt.Sprintf("m%d", i) {
			t.Fatalf("MQTT on b2 after b3 died: %q, want m%d", p, i)
		}
	}
}

// TestMQTTSubscribeCoversFilter: once an MQTT SUBACK is in, every message
// another broker publishes afterwards reaches the subscriber: the SUBSCRIBE
// waits until the stream consumer reads the new filter, as an HTTP/3
// subscription does (before, the consumer took the filter up just after the
// SUBACK, and a message published in between was history to it: missed).
// Each round a new filter, published to at once after the SUBACK.
func TestMQTTSubscribeCoversFilter(t *testing.T) {
	t.Parallel()
	_, n := threeBrokers(t, nil)
	m2 := n[1].mqttConnect("m2")
	for i := range 10 {
		filter := fmt.Sprintf("cov%d/#", i)
		m2.subscribe(filter)
		n[2].publish(fmt.Sprintf("cov%d/x", i), fmt.Sprintf("p%d", i), "qos=1")
		if p := m2.next(); string(p.Payload) != fmt.Sprintf("p%d", i) {
			t.Fatalf("round %d: MQTT on b2 got %q on %q, want p%d", i, p.Payload, p.Topic, i)
		}
	}
}

// TestSSEResumeOnAnotherBroker: a browser's EventSource resumes on another
// broker: the SSE event ids are EPOCH-SEQ of the cluster, and Last-Event-ID
// sent to another broker continues after that event, with no gap event.
func TestSSEResumeOnAnotherBroker(t *testing.T) {
	t.Parallel()
	_, n := threeBrokers(t, nil)
	sse := func(nd *node, lastID string) (<-chan [2]string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nd.b.URL+"/v1/topics/"+url.PathEscape("e/#"), nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := nd.h3.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("sse subscribe: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			t.Fatalf("sse subscribe: %s: %s", resp.Status, body)
		}
		ch := make(chan [2]string, 64) // {event id or "gap", data}
		go func() {
			defer resp.Body.Close()
			defer close(ch)
			sc := bufio.NewScanner(resp.Body)
			var id, ev string
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "id: "):
					id = line[4:]
				case strings.HasPrefix(line, "event: "):
					ev = line[7:]
				case strings.HasPrefix(line, "data: "):
					if ev == "gap" {
						id = "gap"
					}
					ch <- [2]string{id, line[6:]}
					id, ev = "", ""
				}
			}
		}()
		t.Cleanup(cancel)
		return ch, cancel
	}
	next := func(ch <-chan [2]string) [2]string {
		t.Helper()
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("sse stream ended")
			}
			return e
		case <-time.After(timeout):
			t.Fatal("no sse event")
		}
		return [2]string{}
	}
	ch1, stop1 := sse(n[0], "")
	for i := range 3 {
		n[0].publish("e/a", fmt.Sprintf("x%d", i), "qos=1")
	}
	var lastID string
	for i := range 3 {
		e := next(ch1)
		if !strings.Contains(e[1], fmt.Sprintf("x%d", i)) && !strings.Contains(e[1], base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("x%d", i)))) {
			t.Fatalf("b1 event %d: %v", i, e)
		}
		lastID = e[0]
	}
	stop1()
	ep, _, err := wire.ParseEventID(lastID)
	if err != nil || ep != n[1].b.Broker.Epoch() {
		t.Fatalf("event id %q: epoch %x (%v), want the cluster's %x", lastID, ep, err, n[1].b.Broker.Epoch())
	}
	n[2].publish("e/a", "y0", "qos=1")
	n[2].publish("e/a", "y1", "qos=1")
	ch2, _ := sse(n[1], lastID)
	for _, want := range []string{"y0", "y1"} {
		e := next(ch2)
		if e[0] == "gap" || !strings.Contains(e[1], want) && !strings.Contains(e[1], base64.StdEncoding.EncodeToString([]byte(want))) {
			t.Fatalf("resume on b2 after %s: %v, want %s", lastID, e, want)
		}
	}
}

// TestRetainedFullStillDelivered: a retained message the cluster accepted
// but a broker's retained store cannot hold is still delivered there live
// (and in its history); that broker then holds no retained message for the
// topic rather than a stale one.
func TestRetainedFullStillDelivered(t *testing.T) {
	t.Parallel()
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "a", nc.urls(), func(_ *broker.Options, co *cluster.Options) { co.Replicas = 1 })
	b := startNode(t, pki, "b", nc.urls(), func(bo *broker.Options, co *cluster.Options) {
		co.Replicas = 1
		bo.Limits.RetainedBytes = 300
	})
	sb := b.subscribe("r/#", "")
	a.publish("r/t", "small", "qos=1&retain=1")
	big := strings.Repeat("x", 400)
	a.publish("r/t", big, "qos=1&retain=1")
	a.publish("r/t", "after", "qos=1")
	for _, want := range []string{"small", big, "after"} {
		if p := string(sb.nextMessage().Payload); p != want {
			t.Fatalf("b delivered %.20q, want %.20q", p, want)
		}
	}
	if got := b.b.Broker.Space().RetainedMessages(); len(got) != 0 {
		t.Fatalf("b keeps %d retained messages (%.20q), want none (the newest did not fit, the older is stale)", len(got), got[0].Payload)
	}
	// a applies its own messages from the stream too, on its own
	// consumer: b having delivered them says nothing of a's progress.
	waitFor(t, func() bool {
		got := a.b.Broker.Space().RetainedMessages()
		return len(got) == 1 && string(got[0].Payload) == big
	}, "a to retain the big message")
}

// TestSequencedInterest: with cluster-wide numbers a broker still reads
// only what its subscribers want from the stream (its consumer's filter
// follows their filters); a subscriber resuming there on another filter
// gets the earlier messages read from the stream, then live ones, in
// order, once; a new subscriber on a filter gets no old message as news.
func TestSequencedInterest(t *testing.T) {
	t.Parallel()
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	mod := func(_ *broker.Options, co *cluster.Options) { co.Replicas = 1 }
	a := startNode(t, pki, "a", nc.urls(), mod)
	b := startNode(t, pki, "b", nc.urls(), mod)
	sx := b.subscribe("x/#", "")
	waitFor(t, func() bool { return b.link.Stats().Subjects == 2 }, "b's consumer filter x and x.>")
	y0 := a.publish("y/1", "y0", "qos=1")
	a.publish("y/1", "y1", "qos=1")
	a.publish("x/1", "x0", "qos=1")
	if p := string(sx.nextMessage().Payload); p != "x0" {
		t.Fatalf("b: %q", p)
	}
	// The link counts a message after it has applied (delivered) it, in
	// stream order: once x0 is counted, y0 and y1 would have been before.
	waitFor(t, func() bool { return b.link.Stats().Received >= 1 }, "b to count x0")
	if st := b.link.Stats(); st.Received != 1 {
		t.Fatalf("b received %d messages, want 1 (nothing on y/#: no subscriber there)", st.Received)
	}
	// Published after b's last message: between where b's consumer starts
	// reading y/# and the stream's end then. A new subscriber on y/# gets
	// neither it nor y0, y1 as news.
	a.publish("y/1", "yh", "qos=1")
	sy := b.subscribe("y/#", "")
	a.publish("y/1", "y2", "qos=1")
	if p := string(sy.nextMessage().Payload); p != "y2" {
		t.Fatalf("new subscriber on y/#: %q, want y2", p)
	}
	// A resume on y/# after y0 (read from the stream), then live.
	r := b.subscribe("y/#", fmt.Sprintf("since=%d&epoch=%s", y0, wire.FormatEpoch(b.b.Broker.Epoch())))
	a.publish("y/1", "y3", "qos=1")
	var last uint64
	for _, want := range []string{"y1", "yh", "y2", "y3"} {
		f := r.next()
		if f.IsGap() || string(f.Payload) != want || f.Seq <= last {
			t.Fatalf("resume on y/#: %+v (payload %q), want %s", f, f.Payload, want)
		}
		last = f.Seq
	}
}

// TestSubscribeWhileNATSDown: a subscriber on a filter its broker does not
// read yet, made while NATS is unreachable, gets what another broker
// accepted meanwhile once NATS is back (its news begins at the last number
// its broker applied, not where the stream was when the broker could read
// the filter).
func TestSubscribeWhileNATSDown(t *testing.T) {
	t.Parallel()
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	mod := func(_ *broker.Options, co *cluster.Options) {
		co.Replicas = 1
		co.ReconnectWait = 20 * time.Millisecond
		co.MaxReconnectWait = 100 * time.Millisecond
	}
	a := startNode(t, pki, "a", nc.urls(), mod)
	b := startNode(t, pki, "b", nc.urls(), mod)
	a.publish("w/0", "before", "qos=1")
	nc.nodes[0].Shutdown()
	nc.nodes[0].WaitForShutdown()
	waitFor(t, func() bool { return !a.link.Stats().Connected && !b.link.Stats().Connected }, "links down")
	sw := b.subscribe("w/#", "")
	a.publish("w/1", "held", "qos=1")
	nc.restart(0)
	// Its broker cannot tell which messages it had not read were published
	// before the subscription: it may get "before" too (news from the last
	// number it applied on), but never misses "held".
	p := string(sw.nextMessage().Payload)
	if p == "before" {
		p = string(sw.nextMessage().Payload)
	}
	if p != "held" {
		t.Fatalf("subscriber made while NATS was down: %q, want held", p)
	}
}
