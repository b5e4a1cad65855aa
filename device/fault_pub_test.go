package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/device/client/inorder"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/testutil"
)

// Issue 11's publisher kill -9 fault test: a real `quiot pub --stdin
// --spool` process (this test binary re-executed, see TestFaultChild)
// fills its spool while the link is down and is killed with SIGKILL, then
// killed again in the middle of delivering, then started a third time with
// empty input; every line it accepted reaches the subscriber, in order,
// with duplicates only around the kills (recognised by client.Deduper).

// pubFaultBroker starts a broker of proto on loopback and a subscriber
// straight on it; it returns the broker's UDP address and URL scheme.
func pubFaultBroker(t *testing.T, proto string, pki *testutil.PKI, topic string, h func(client.Message)) (net.Addr, string) {
	t.Helper()
	var (
		addr   net.Addr
		scheme string
		subURL string
	)
	switch proto {
	case "h3":
		b := brokertest.Start(t, pki, nil)
		addr, scheme, subURL = b.Addr(), "https", b.URL
	default:
		s := mqtttest.Start(t, pki, mqttquic.Options{})
		addr, scheme, subURL = s.QUICAddr(), "mqtt-quic", mqtttest.QUICURL(s)
	}
	sub, err := client.New(client.Options{Broker: subURL, RootCAs: pki.Pool(), Reconnect: true, MaxBackoff: time.Second, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-done; sub.Close() })
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		done <- sub.Subscribe(client.WithSubscribed(ctx, func() { once.Do(func() { close(ready) }) }), topic, 0, h)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("subscribe: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("subscription not live within 30 s")
	}
	return addr, scheme
}

func TestFaultPubKill9(t *testing.T) {
	for _, proto := range []string{"h3", "mqtt-quic"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			const n = 150
			pki := testutil.NewPKI(t)
			ca := pki.CAFile(t)
			sub := inorder.New(inorder.Options{})
			upstream, scheme := pubFaultBroker(t, proto, pki, "fault/k", sub.Handle)
			// 10 ms each way: delivery (one message per round trip) takes
			// long enough to be cut by a kill.
			relay, err := netimpair.New(netimpair.Options{Upstream: upstream.String(), Up: netimpair.Direction{Delay: 10 * time.Millisecond}, Down: netimpair.Direction{Delay: 10 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { relay.Close() })
			relay.SetBlackout(true)
			spoolDir := filepath.Join(t.TempDir(), "spool")
			args := []string{"pub", "--config", "", "--broker", fmt.Sprintf("%s://localhost:%d", scheme, relay.Addr().Port), "--ca", ca,
				"--topic", "fault/k", "--stdin", "--spool", spoolDir, "--max-backoff", "1s", "--log-level", "debug"}

			// 1. The broker is unreachable: every line goes to the spool;
			// then SIGKILL with a full spool and nothing delivered.
			p := startChild(t, true, args...)
			var in strings.Builder
			for i := range n {
				fmt.Fprintf(&in, "%d\n", i)
			}
			if _, err := io.WriteString(p.stdin, in.String()); err != nil {
				t.Fatal(err)
			}
			p.stdin.Close()
			p.stderr.wait(t, regexp.MustCompile(fmt.Sprintf(`msg=spooled .*id=%d\b`, n)), 30*time.Second)
			p.kill()
			// As a power cut in the middle of a write would leave it: the
			// start of one more record at the end of the log.
			tearSpool(t, spoolDir)

			// 2. Restarted with empty input, still cut off: it finds the
			// spool and waits; then the link comes back and it is killed
			// again in the middle of delivering.
			p = startChild(t, false, args...)
			p.stderr.wait(t, regexp.MustCompile(`cutting off a torn record`), 30*time.Second)
			p.stderr.wait(t, regexp.MustCompile(fmt.Sprintf(`spool has undelivered messages" .*messages=%d\b`, n)), 30*time.Second)
			relay.SetBlackout(false)
			sub.WaitTopic(t, "fault/k", n/3, 30*time.Second)
			p.kill()
			select {
			case <-p.done:
			default:
				t.Fatal("not dead")
			}

			// 3. Started once more with empty input: it delivers the rest and
			// ends by itself once the spool has drained.
			p = startChild(t, false, args...)
			select {
			case <-p.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("third publisher did not end within 60 s\n%s", p.stderr)
			}
			if p.err != nil {
				t.Fatalf("third publisher: %v\n%s", p.err, p.stderr)
			}
			summary := p.stdout.wait(t, regexp.MustCompile(`^spooled 0 message\(s\)`), time.Second)
			sub.WaitTopic(t, "fault/k", n, 30*time.Second)
			sub.Check(t, map[string]int{"fault/k": n})
			t.Logf("last run: %s", summary)
		})
	}
}

// tearSpool appends a partial record (a length, a checksum and a few body
// bytes of a record of 64) to the newest segment file in dir.
func tearSpool(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no spool segments in %s: %v", dir, err)
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte{64, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 151, 0, 0}); err != nil {
		t.Fatal(err)
	}
}
