package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
)

// TestHoldBytes: what a broker holds for the cluster while NATS is
// unreachable is bounded in bytes (Options.HoldBytes, --cluster-hold-bytes;
// topic and payload of each message): 100 messages of 1 KiB published
// over HTTP/3 against a 16 KiB bound leave as many held as fit, the oldest
// dropped and counted, with LocalNumbering and with cluster-wide numbers
// (where the messages wait in the hold to be numbered); once NATS is back
// the held ones reach the cluster.
func TestHoldBytes(t *testing.T) {
	t.Parallel()
	for _, local := range []bool{false, true} {
		name := "cluster-wide numbers"
		if local {
			name = "local numbering"
		}
		t.Run(name, func(t *testing.T) { holdBytes(t, local) })
	}
}

func holdBytes(t *testing.T, local bool) {
	const (
		n        = 100
		size     = 1 << 10
		maxBytes = 16 << 10
	)
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "a", nc.urls(), func(_ *broker.Options, co *cluster.Options) {
		co.Replicas, co.LocalNumbering = 1, local
		co.HoldBytes = maxBytes
	})
	nc.nodes[0].Shutdown()
	nc.nodes[0].WaitForShutdown()
	waitFor(t, func() bool { return !a.link.Stats().Connected }, "link down")

	payload := strings.Repeat("p", size-len("h/000"))
	for i := range n {
		a.publish(fmt.Sprintf("h/%03d", i), payload, "qos=1")
	}
	s := a.link.Stats()
	if s.HeldBytes > maxBytes || s.Held != maxBytes/size || s.HeldBytes != int64(s.Held*size) || s.Dropped != uint64(n-s.Held) {
		t.Fatalf("stats %+v: want %d messages of %d bytes held within %d bytes, %d dropped", s, maxBytes/size, size, maxBytes, n-maxBytes/size)
	}

	nc.restart(0)
	waitFor(t, func() bool { s := a.link.Stats(); return s.Held == 0 && s.Forwarded >= uint64(maxBytes/size) }, "held messages sent after NATS is back")
}
