package client_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/device/client/inorder"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/spool"
	"github.com/quiot/quiot/internal/testutil"
)

// Fault tests of issue 11 for the publisher: a spooled publisher behind
// the userspace link emulator (netimpair), a subscriber straight on the
// broker that counts every message. Each run ends with every message the
// publisher accepted delivered, in order per topic, with no gap, and
// duplicates only as QoS 1 allows (recognised and removed by
// client.Deduper).

// faultRig is a broker of one protocol, a relay in front of it for the
// publisher, and a counting subscriber.
type faultRig struct {
	t      *testing.T
	pki    *testutil.PKI
	relay  *netimpair.Relay
	pubURL string // through the relay
	count  *inorder.Counter
}

// protoSetup starts a broker and returns its UDP address, the publisher
// URL scheme and a subscriber client connected straight to it.
type protoSetup func(t *testing.T, pki *testutil.PKI) (upstream net.Addr, scheme string, sub client.Client)

func h3Broker(t *testing.T, pki *testutil.PKI) (net.Addr, string, client.Client) {
	b := brokertest.Start(t, pki, nil)
	sub, err := client.New(client.Options{Broker: b.URL, RootCAs: pki.Pool(), Reconnect: true, MaxBackoff: time.Second, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return b.Addr(), "https", sub
}

func mqttBroker(t *testing.T, pki *testutil.PKI) (net.Addr, string, client.Client) {
	s := startMQTT(t, pki)
	sub, err := client.New(client.Options{Broker: "mqtt-quic://localhost:" + quicPort(s), RootCAs: pki.Pool(), Reconnect: true, MaxBackoff: time.Second, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return s.QUICAddr(), "mqtt-quic", sub
}

var faultProtos = []struct {
	name  string
	setup protoSetup
	mode  string // HTTP/3 publish mode
}{
	{"h3", h3Broker, "request"},
	{"h3-stream", h3Broker, "stream"},
	{"mqtt-quic", mqttBroker, ""},
}

// newFaultRig starts the broker, the relay with the given impairment and
// the subscriber on fault/#; it returns once the subscription is live.
func newFaultRig(t *testing.T, setup protoSetup, imp netimpair.Direction) *faultRig {
	t.Helper()
	pki := testutil.NewPKI(t)
	up, scheme, sub := setup(t, pki)
	relay, err := netimpair.New(netimpair.Options{Upstream: up.String(), Up: imp, Down: imp, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	r := &faultRig{
		t: t, pki: pki, relay: relay,
		pubURL: fmt.Sprintf("%s://localhost:%d", scheme, relay.Addr().Port),
		count:  inorder.New(inorder.Options{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	subDone := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-subDone })
	ready := make(chan struct{})
	var once sync.Once
	sctx := client.WithSubscribed(ctx, func() { once.Do(func() { close(ready) }) })
	go func() { subDone <- sub.Subscribe(sctx, "fault/#", 0, r.count.Handle) }()
	select {
	case <-ready:
	case err := <-subDone:
		t.Fatalf("subscribe: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("subscription not live after 30 s")
	}
	return r
}

// publisher returns a spooled publisher through the relay; mode is the
// HTTP/3 publish mode ("": the default).
func (r *faultRig) publisher(dir, mode string) *client.Spooled {
	r.t.Helper()
	p, err := client.NewSpooled(client.Options{
		Broker: r.pubURL, RootCAs: r.pki.Pool(), PublishMode: mode,
		Reconnect: true, MaxBackoff: time.Second,
		Logger: testutil.DiscardLogger(),
	}, spool.Options{Dir: dir})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { p.Close() })
	return p
}

// publishLoop publishes to fault/a and fault/b alternately, one message
// per tick, until stop is closed; it returns how many each topic got.
func publishLoop(t *testing.T, p client.Client, tick time.Duration, stop <-chan struct{}, published chan<- map[string]int, accepted *atomic.Int64) {
	n := map[string]int{}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	defer func() { published <- n }()
	for i := 0; ; i++ {
		tp := "fault/" + string(rune('a'+i%2))
		if _, err := p.Publish(context.Background(), tp, []byte(strconv.Itoa(n[tp])), client.PublishOptions{QoS: 1}); err != nil {
			t.Errorf("publish: %v", err)
			return
		}
		n[tp]++
		accepted.Add(1)
		select {
		case <-stop:
			return
		case <-tk.C:
		}
	}
}

// publishN publishes n messages to fault/a and fault/b alternately, the
// counters 0, 1, 2, ... on each; it returns how many each topic got.
func publishN(t *testing.T, p client.Client, n int) map[string]int {
	t.Helper()
	pub := map[string]int{}
	for i := range n {
		tp := "fault/" + string(rune('a'+i%2))
		if _, err := p.Publish(context.Background(), tp, []byte(strconv.Itoa(pub[tp])), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
		pub[tp]++
	}
	return pub
}

// TestFaultBlackout: the publisher's link is cut for 30 s while it keeps
// publishing; the spool takes the messages and delivers them, in order,
// once the link is back.
func TestFaultBlackout(t *testing.T) {
	for _, pr := range faultProtos {
		if pr.mode == "stream" {
			// Three 30 s subtests would not run at once under go test's
			// default -parallel (GOMAXPROCS, 2 on the CI host): the
			// streamed publish is covered by TestFaultLoss.
			continue
		}
		t.Run(pr.name, func(t *testing.T) {
			t.Parallel()
			const blackout = 30 * time.Second
			r := newFaultRig(t, pr.setup, netimpair.Direction{})
			p := r.publisher(t.TempDir(), pr.mode)
			stop := make(chan struct{})
			published := make(chan map[string]int, 1)
			var accepted atomic.Int64
			go publishLoop(t, p, 50*time.Millisecond, stop, published, &accepted)
			r.count.WaitTotal(t, 10, 30*time.Second) // flowing
			r.relay.SetBlackout(true)
			cut := time.Now()
			atCut := accepted.Load()
			// The scenario: the link stays down for 30 s (a duration of the
			// fault, not a synchronisation); publishing goes on.
			<-time.After(blackout)
			// Everything accepted during the blackout is in the spool (one
			// message in flight at the cut may have got through).
			during := accepted.Load() - atCut
			if st := p.SpoolStats(); during < 10 || int64(st.Pending) < during-1 {
				t.Errorf("%d messages accepted during the blackout, %d pending in the spool", during, st.Pending)
			}
			r.relay.SetBlackout(false)
			back := time.Now()
			// Publish a little more after the link is back, then stop.
			before := r.count.Total()
			r.count.WaitTotal(t, before+5, 30*time.Second)
			close(stop)
			n := <-published
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Drain(ctx); err != nil {
				t.Fatalf("drain: %v (stats %+v)", err, p.SpoolStats())
			}
			r.count.WaitTotal(t, n["fault/a"]+n["fault/b"], 30*time.Second)
			r.count.Check(t, n)
			st := p.SpoolStats()
			rs := r.relay.Stats()
			t.Logf("blackout %v; recovered %v after the link came back; spool %+v; relay dropped %d up, %d down",
				back.Sub(cut).Round(time.Millisecond), time.Since(back).Round(time.Millisecond), st, rs.Up.DroppedBlackout, rs.Down.DroppedBlackout)
			if st.Dropped+st.Expired+st.Rejected != 0 {
				t.Fatalf("the spool lost messages: %+v", st)
			}
		})
	}
}

// TestFaultLoss: 20 % loss both ways for the whole run.
func TestFaultLoss(t *testing.T) {
	for _, pr := range faultProtos {
		t.Run(pr.name, func(t *testing.T) {
			t.Parallel()
			const n = 100
			r := newFaultRig(t, pr.setup, netimpair.Direction{LossPct: 20, Delay: 2 * time.Millisecond})
			p := r.publisher(t.TempDir(), pr.mode)
			pub := publishN(t, p, n)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := p.Drain(ctx); err != nil {
				t.Fatalf("drain: %v (stats %+v)", err, p.SpoolStats())
			}
			r.count.WaitTotal(t, n, 30*time.Second)
			r.count.Check(t, pub)
			rs := r.relay.Stats()
			t.Logf("spool %+v; relay dropped %d of %d up, %d of %d down", p.SpoolStats(), rs.Up.Dropped(), rs.Up.Received, rs.Down.Dropped(), rs.Down.Received)
			// Loss must have happened, not in each direction: a streamed
			// publish's acknowledgements can take so few datagrams down
			// (some 24 in loaded runs, which failed here) that 20 % loss
			// drops none of them.
			if rs.Up.DroppedRandom+rs.Down.DroppedRandom == 0 {
				t.Fatal("the relay dropped nothing")
			}
		})
	}
}

// TestSpooledRestart: messages spooled while the broker was unreachable
// survive Close and are delivered by the next publisher on the directory.
func TestSpooledRestart(t *testing.T) {
	r := newFaultRig(t, h3Broker, netimpair.Direction{})
	dir := t.TempDir()
	r.relay.SetBlackout(true)
	p := r.publisher(dir, "")
	pub := publishN(t, p, 20)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	r.relay.SetBlackout(false)
	p = r.publisher(dir, "")
	if st := p.SpoolStats(); st.Recovered != 20 {
		t.Fatalf("recovered %d, want 20", st.Recovered)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r.count.WaitTotal(t, 20, 30*time.Second)
	r.count.Check(t, pub)
}

// TestFaultStreamWindowResend: a streamed publish with a window of
// messages in flight loses its connection mid-window; the spooled client
// sends the unacknowledged ones again, in order, and the subscriber ends
// with every message once, in order.
func TestFaultStreamWindowResend(t *testing.T) {
	const n = 300
	r := newFaultRig(t, h3Broker, netimpair.Direction{Delay: 5 * time.Millisecond})
	prof := quictune.Default()
	prof.MaxIdleTimeout = quictune.Duration(time.Second) // the cut kills the connection soon
	p, err := client.NewSpooled(client.Options{
		Broker: r.pubURL, RootCAs: r.pki.Pool(), PublishMode: "stream", Tuning: prof,
		MaxBackoff: 200 * time.Millisecond, Logger: testutil.DiscardLogger(),
	}, spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pub := publishN(t, p, n)
	r.count.WaitTotal(t, 30, 30*time.Second) // delivering
	r.relay.SetBlackout(true)
	// Keep the link cut until the client has given up the connection and
	// is retrying (a readiness poll, not a timed wait).
	deadline := time.Now().Add(30 * time.Second)
	for p.SpoolStats().Retries == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no retry within 30 s of the cut: %+v", p.SpoolStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.relay.SetBlackout(false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (stats %+v)", err, p.SpoolStats())
	}
	r.count.WaitTotal(t, n, 30*time.Second)
	r.count.Check(t, pub)
	t.Logf("spool %+v", p.SpoolStats())
}
