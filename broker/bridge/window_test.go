package bridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/testutil"
)

// seqReader reads "site-1/sensors/seq m-N" messages and keeps each N's
// first arrival in order (duplicates of cut publishes removed).
type seqReader struct {
	seen  map[int]int
	order []int
}

func (r *seqReader) add(t *testing.T, line string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(line, "site-1/sensors/seq m-%d", &n); err != nil {
		t.Fatalf("upstream got %q", line)
	}
	if r.seen == nil {
		r.seen = map[int]int{}
	}
	if r.seen[n] == 0 {
		r.order = append(r.order, n)
	}
	r.seen[n]++
	return n
}

// check fails unless the first arrivals are exactly 0..total-1 in order;
// it returns the number of duplicates.
func (r *seqReader) check(t *testing.T, total int) int {
	t.Helper()
	if len(r.order) != total {
		t.Fatalf("%d distinct messages, want %d", len(r.order), total)
	}
	for i, n := range r.order {
		if n != i {
			t.Fatalf("order broken at %d: got m-%d (order %v)", i, n, r.order)
		}
	}
	dups := 0
	for _, c := range r.seen {
		dups += c - 1
	}
	return dups
}

// TestPublishWindow: over a link with 200 ms each way (MQTT over QUIC to
// a second quiot through the userspace emulator) the bridge keeps more
// than one QoS 1 publish in flight: messages reach the upstream before
// the first PUBACK is back at the edge (with one publish at a time a
// message goes up only once the one before it was acknowledged), all in
// order, none lost. Then the upstream's listener stops while a window of
// publishes is in flight and starts again: every message arrives, in
// order once the duplicates of the cut publishes are removed.
func TestPublishWindow(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := brokertest.Start(t, pki, nil)
	ms := mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker})
	qaddr := ms.QUICAddr().String()
	delay := netimpair.Direction{Delay: 200 * time.Millisecond}
	startRelay := func(listen string) *netimpair.Relay {
		relay, err := netimpair.New(netimpair.Options{Upstream: qaddr, Listen: listen, Up: delay, Down: delay, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = relay.Close() })
		return relay
	}
	relay := startRelay("")
	caFile := pki.CAFile(t)
	upSub := edgeSub(ctx, t, up, "site-1/sensors/#")
	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "slow"
url           = "mqtt-quic://localhost:%d"
ca_file       = %q
out           = ["sensors/#"]
remote_prefix = "site-1/"
keepalive     = "2s"
reconnect_min = "50ms"
reconnect_max = "500ms"
`, relay.Addr().Port, caFile)))
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
		t.Fatalf("bridge never connected: %+v", br.Stats())
	}
	const n = 50
	var r seqReader
	next := func(what string) int {
		m := nextEdge(ctx, t, upSub, what)
		return r.add(t, m.Topic+" "+string(m.Payload))
	}

	// A window: messages reach the upstream before the edge has any PUBACK.
	for i := range n {
		publish(ctx, t, edge.Broker, "sensors/seq", fmt.Sprintf("m-%d", i), false)
	}
	early := 0
	for len(r.order) < n {
		next(fmt.Sprintf("message %d of %d", len(r.order)+1, n))
		if br.Stats().Sent == 0 {
			early++
		}
	}
	if dups := r.check(t, n); dups != 0 {
		t.Fatalf("%d duplicates without a cut", dups)
	}
	t.Logf("%d of %d messages reached the upstream before the edge had the first PUBACK", early, n)
	if early < 2 {
		t.Fatalf("%d message(s) reached the upstream before the first PUBACK came back: one publish in flight at a time", early)
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Sent == n && s.Queued == 0 }); err != nil {
		t.Fatalf("stats %+v", br.Stats())
	}

	// A cut in the middle of a window: once the first message of the next
	// batch is upstream, the link goes (the relay's delay lines, with the
	// PUBACKs on their way down, are discarded) and the upstream's
	// listener stops; both come back on the same addresses. The edge
	// learns of it from the MQTT keep-alive (or QUIC's stateless reset).
	for i := n; i < 2*n; i++ {
		publish(ctx, t, edge.Broker, "sensors/seq", fmt.Sprintf("m-%d", i), false)
	}
	next("the first message of the second batch")
	s := br.Stats()
	_ = relay.Close()
	_ = ms.Close()
	t.Logf("cut with %d of the second batch acknowledged at the edge (%+v)", s.Sent-n, s)
	startRelay(relay.Addr().String())
	mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker, QUICAddr: qaddr})
	for len(r.order) < 2*n {
		next(fmt.Sprintf("message %d of %d", len(r.order)+1, 2*n))
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
		t.Fatal(err)
	}
	dups := r.check(t, 2*n)
	s = br.Stats()
	t.Logf("all %d messages in order; %d duplicates; bridge %+v", 2*n, dups, s)
	if s.Sent != 2*n || s.Dropped != 0 || s.Connects < 2 {
		t.Fatalf("stats %+v: want %d sent, none dropped, a reconnect", s, 2*n)
	}
	if dups < 1 || dups > bridge.DefaultMaxInflight {
		t.Fatalf("%d duplicates from one cut of a window that had reached the upstream: want 1 to %d", dups, bridge.DefaultMaxInflight)
	}
}

// TestWindowCut: the link swallows everything the bridge sends while a
// full window of publishes goes out (max_inflight PUBLISH packets, none
// answered), then the connection breaks: on the next connection every
// message goes up again, in order, none lost; the store (store_dir) and
// MQTT 3.1.1 the same. With clean_start = false the upstream keeps the
// session and paho sends the window's packets again itself (DUP) before
// the bridge sends them anew: each arrives twice, in order.
func TestWindowCut(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquitto(t, pki, false)
	for _, tc := range []struct {
		name, table string
		dups        bool // the session's copies too
	}{
		{"clean", "", false},
		{"session", "clean_start = false\n", true},
		{"store", "store_dir = %q\n", false},
		{"mqtt311", "mqtt_version = \"3.1.1\"\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			edge := startEdge(t, pki)
			px := startProxy(t, "127.0.0.1:"+mq.port)
			up := mq.sub(ctx, t, "site-1/"+tc.name+"/#")
			table := tc.table
			if strings.Contains(table, "%q") {
				table = fmt.Sprintf(table, t.TempDir())
			}
			const window, total = 8, 30
			br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "cloud"
url           = "mqtt://%s"
out           = ["sensors/#"]
remote_prefix = "site-1/%s/"
username      = %q
password      = %q
client_id     = "window-%s"
max_inflight  = %d
reconnect_min = "50ms"
reconnect_max = "200ms"
`, px.addr(), tc.name, upUser, upPass, tc.name, window)+table))
			if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
				t.Fatalf("bridge never connected: %+v", br.Stats())
			}
			px.swallow.Store(true)
			for i := range total {
				publish(ctx, t, edge.Broker, "sensors/seq", fmt.Sprintf("m-%d", i), false)
			}
			for px.eatenPubs.Load() < window {
				select {
				case <-px.ate:
				case <-ctx.Done():
					t.Fatalf("%d PUBLISH packets went out unanswered, want a window of %d (%+v)", px.eatenPubs.Load(), window, br.Stats())
				}
			}
			if got := px.eatenPubs.Load(); got != window {
				t.Fatalf("%d PUBLISH packets went out unanswered: more than max_inflight %d", got, window)
			}
			if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == total }); err != nil || br.Stats().Sent != 0 {
				t.Fatalf("stats %+v: want all %d queued, none sent", br.Stats(), total)
			}
			px.swallow.Store(false)
			px.cut()
			var r seqReader
			lines := 0
			for len(r.order) < total || (tc.dups && lines < total+window) {
				l := up.next(ctx, t, fmt.Sprintf("message %d of %d", len(r.order)+1, total))
				r.add(t, strings.Replace(l, "site-1/"+tc.name+"/", "site-1/", 1))
				lines++
			}
			if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
				t.Fatal(err)
			}
			dups := r.check(t, total)
			if want := map[bool]int{false: 0, true: window}[tc.dups]; dups != want {
				t.Fatalf("%d duplicates, want %d", dups, want)
			}
			if s := br.Stats(); s.Sent != total || s.Dropped != 0 || s.Connects < 2 {
				t.Fatalf("stats %+v: want %d sent, none dropped, a reconnect", s, total)
			}
		})
	}
}

// TestRefusedInWindow: messages the upstream refuses (mosquitto's ACL:
// PUBACK reason 0x87) among a stream of publishes in flight are counted
// as refused and given up; the others arrive once each, in order.
func TestRefusedInWindow(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquittoACL(t, pki, false, "user "+upUser+"\ntopic readwrite sensors/#\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := mq.sub(ctx, t, "sensors/#")
	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "cloud"
url           = "mqtt://127.0.0.1:%s"
out           = ["sensors/#", "other/#"]
username      = %q
password      = %q
`, mq.port, upUser, upPass)))
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
		t.Fatalf("bridge never connected: %+v", br.Stats())
	}
	const total = 40
	var want []string
	refused := 0
	for i := range total {
		if i%5 == 2 {
			publish(ctx, t, edge.Broker, "other/x", fmt.Sprintf("r-%d", i), false)
			refused++
			continue
		}
		publish(ctx, t, edge.Broker, "sensors/seq", fmt.Sprintf("m-%d", i), false)
		want = append(want, fmt.Sprintf("sensors/seq m-%d", i))
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
		t.Fatalf("stats %+v", br.Stats())
	}
	for i, w := range want {
		if l := up.next(ctx, t, w); l != w {
			t.Fatalf("message %d upstream: %q, want %q", i, l, w)
		}
	}
	s := br.Stats()
	if s.Refused != uint64(refused) || s.Sent != uint64(total-refused) || !strings.Contains(s.LastError, "0x87") {
		t.Fatalf("stats %+v: want %d refused (0x87), %d sent", s, refused, total-refused)
	}
}
