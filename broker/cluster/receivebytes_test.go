package cluster_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
)

// TestReceiveBytes: the messages from the cluster that wait for a broker
// that cannot take them yet are bounded in bytes (Options.ReceiveBytes),
// not only in number: b (LocalNumbering, as every durable broker) is
// stalled in its first delivery while a publishes 40 messages of 64 KiB;
// b holds at most 1 MiB of them, drops the others as a slow consumer
// (counted), and delivers the ones it held once it goes on.
func TestReceiveBytes(t *testing.T) {
	t.Parallel()
	const (
		n        = 40
		size     = 64 << 10
		maxBytes = 1 << 20
	)
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "a", nc.urls(), func(_ *broker.Options, co *cluster.Options) {
		co.Replicas, co.LocalNumbering = 1, true
	})
	b := startNode(t, pki, "b", nc.urls(), func(_ *broker.Options, co *cluster.Options) {
		co.Replicas, co.LocalNumbering = 1, true
		co.ReceiveBytes = maxBytes
	})
	sb := b.subscribe("big/#", "")
	probe(t, a, "big/probe", func() bool { return len(sb.frames) > 0 })
	for len(sb.frames) > 0 {
		<-sb.frames
	}

	// b's delivery stalls in its first big message (a tap runs in the
	// broker's publish) until release.
	release, stalled := make(chan struct{}), make(chan struct{})
	var relOnce, stallOnce sync.Once
	free := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	b.b.Broker.AddTap(func(m *broker.Message) {
		if strings.HasPrefix(m.Topic, "big/m") {
			stallOnce.Do(func() { close(stalled) })
			<-release
		}
	})
	payload := strings.Repeat("p", size)
	a.publish("big/m", payload, "qos=1")
	<-stalled
	r0 := b.link.Stats().Received // the probes, all delivered before
	for range n - 1 {
		a.publish("big/m", payload, "qos=1")
	}
	// One message is in the stalled delivery; at most maxBytes/size wait.
	least := uint64(n - 1 - maxBytes/size)
	waitFor(t, func() bool { return b.link.Stats().SlowConsumer >= least }, "b to drop what is beyond its receive bound")
	free()
	waitFor(t, func() bool { s := b.link.Stats(); return s.Received-r0+s.SlowConsumer >= n }, "b to deliver what it held")
	s := b.link.Stats()
	s.Received -= r0
	if s.Received > 1+maxBytes/size || s.Received+s.SlowConsumer != n {
		t.Fatalf("stats %+v: want at most %d of the %d messages delivered (1 + %d bytes), the others dropped", s, 1+maxBytes/size, n, maxBytes)
	}
	for range s.Received {
		if f := sb.nextMessage(); string(f.Payload) != payload {
			t.Fatalf("b's subscriber got %s %.20q, want the big messages b held", f.Topic, f.Payload)
		}
	}
}
