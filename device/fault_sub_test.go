package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/spool"
	"github.com/quiot/quiot/internal/testutil"
)

// dedupCases are `quiot sub` with and without --dedup on a stream in which
// message 0 comes twice: the payloads it prints, one a line (raw output's
// newline separator).
var dedupCases = []dedupCase{
	{"default", nil, "0\n1\n2\n", true},
	{"off", []string{"--dedup=false"}, "0\n0\n1\n2\n", false},
}

type dedupCase struct {
	name    string
	flags   []string
	want    string
	dropped bool // the summary says it dropped a duplicate
}

// subRun is a `quiot sub --topic dup/# --format raw` running in this
// process until it has printed as many lines as its case wants.
type subRun struct {
	*subProc // out signals the first "0\n"
	tc       dedupCase
}

// startSubRun starts it on url and waits until it has subscribed.
func startSubRun(t *testing.T, ctx context.Context, url string, pki *testutil.PKI, tc dedupCase) *subRun {
	t.Helper()
	ca := pki.CAFile(t)
	args := append([]string{"--broker", url, "--ca", ca, "--topic", "dup/#", "--format", "raw",
		"--count", fmt.Sprint(strings.Count(tc.want, "\n"))}, tc.flags...)
	return &subRun{subProc: startSubCmdOut(t, ctx, "0\n", args...), tc: tc}
}

// check waits until the sub ends (after --count) and checks what it
// printed and its summary.
func (r *subRun) check(t *testing.T, ctx context.Context) {
	t.Helper()
	r.wait(t, ctx)
	if r.out.String() != r.tc.want {
		t.Errorf("sub printed %q, want %q", r.out, r.tc.want)
	}
	e := r.errOut.String()
	if summary := fmt.Sprintf("received %d message(s) on dup/#", strings.Count(r.tc.want, "\n")); !strings.Contains(e, summary) {
		t.Errorf("summary: want %q in\n%s", summary, e)
	}
	if strings.Contains(e, "; 1 duplicate(s) dropped") != r.tc.dropped {
		t.Errorf("summary: want a dropped duplicate: %v, in\n%s", r.tc.dropped, e)
	}
}

// TestSubDedup: a QoS 1 duplicate really reaches `quiot sub` through a
// broker (HTTP/3, and MQTT over QUIC): a publisher sends a message again
// with the same send stamp and payload, as a publisher's spool does when
// the acknowledgement of the first send was lost, and the broker delivers
// both copies. By default the sub prints it once and says it dropped one;
// with --dedup=false it prints both (so the duplicate did happen).
func TestSubDedup(t *testing.T) {
	for _, proto := range []string{"h3", "mqtt-quic"} {
		t.Run(proto, func(t *testing.T) {
			pki := testutil.NewPKI(t)
			var url string
			if proto == "h3" {
				url = brokertest.Start(t, pki, nil).URL
			} else {
				url = mqtttest.QUICURL(mqtttest.Start(t, pki, mqttquic.Options{}))
			}
			pub, err := client.New(client.Options{Broker: url, RootCAs: pki.Pool(), Logger: testutil.DiscardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			for _, tc := range dedupCases {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					sub := startSubRun(t, ctx, url, pki, tc)
					sent := time.Now()
					for i, p := range []string{"0", "0", "1", "2"} {
						// The second "0" is the resend: the first one's stamp.
						stamp := sent.Add(time.Duration(max(i-1, 0)) * time.Millisecond)
						if _, err := pub.Publish(ctx, "dup/"+tc.name, []byte(p), client.PublishOptions{QoS: 1, Sent: stamp}); err != nil {
							t.Fatalf("publish %d: %v", i, err)
						}
					}
					sub.check(t, ctx)
				})
			}
		})
	}
}

// TestSubDeduper: what `quiot sub --dedup` takes for a redelivery.
func TestSubDeduper(t *testing.T) {
	stamp := time.Unix(1700000000, 0)
	msg := func(seq uint64, sent time.Time, payload string) client.Message {
		return client.Message{Topic: "a", Seq: seq, Sent: sent, Payload: []byte(payload)}
	}
	gap := client.Message{Topic: "a", Seq: 9, Gap: true}
	tests := []struct {
		name string
		msgs []client.Message
		want []bool // duplicate, per message
	}{
		{"stamped resend (new broker seq)", []client.Message{msg(1, stamp, "x"), msg(2, stamp, "x")}, []bool{false, true}},
		{"same stamp, other payload", []client.Message{msg(1, stamp, "x"), msg(2, stamp, "y")}, []bool{false, false}},
		{"unstamped redelivery (same seq)", []client.Message{msg(1, time.Time{}, "x"), msg(1, time.Time{}, "x")}, []bool{false, true}},
		{"unstamped, next seq", []client.Message{msg(1, time.Time{}, "x"), msg(2, time.Time{}, "x")}, []bool{false, false}},
		{"a gap forgets sequence numbers (a broker numbering again)", []client.Message{msg(1, time.Time{}, "x"), gap, msg(1, time.Time{}, "x")}, []bool{false, false, false}},
		{"a gap keeps stamps", []client.Message{msg(1, stamp, "x"), gap, msg(1, stamp, "x")}, []bool{false, false, true}},
		{"unstamped, no seq (MQTT from another client)", []client.Message{msg(0, time.Time{}, "x"), msg(0, time.Time{}, "x")}, []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d subDeduper
			for i := range tt.msgs {
				if got := d.duplicate(&tt.msgs[i]); got != tt.want[i] {
					t.Errorf("message %d (%+v): duplicate %v, want %v", i, tt.msgs[i], got, tt.want[i])
				}
			}
		})
	}
}

// ackCut is a UDP relay between QUIC clients and a server that can cut
// the way back: while cut, it drops every datagram from the server
// (acknowledgements included) and still forwards the clients' ones. It
// ends the cut by itself when a client dials a new connection (a QUIC v1
// Initial packet), so that the client's next connection works.
type ackCut struct {
	ln, up  *net.UDPConn
	client  atomic.Pointer[net.UDPAddr]
	cut     atomic.Bool
	dropped atomic.Int64
	healed  chan struct{} // closed when a new connection ended a cut
	once    sync.Once
	wg      sync.WaitGroup
}

func newAckCut(t *testing.T, server net.Addr) *ackCut {
	t.Helper()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.DialUDP("udp", nil, server.(*net.UDPAddr))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	r := &ackCut{ln: ln, up: up, healed: make(chan struct{})}
	r.wg.Go(r.upLoop)
	r.wg.Go(r.downLoop)
	t.Cleanup(func() { ln.Close(); up.Close(); r.wg.Wait() })
	return r
}

func (r *ackCut) port() int { return r.ln.LocalAddr().(*net.UDPAddr).Port }

func (r *ackCut) upLoop() {
	b := make([]byte, 64<<10)
	for {
		n, from, err := r.ln.ReadFromUDP(b)
		if err != nil {
			return
		}
		r.client.Store(from)
		// A QUIC v1 Initial: long header, fixed bit, type 0, version 1.
		if n >= 5 && b[0]&0xf0 == 0xc0 && b[1] == 0 && b[2] == 0 && b[3] == 0 && b[4] == 1 && r.cut.CompareAndSwap(true, false) {
			r.once.Do(func() { close(r.healed) })
		}
		_, _ = r.up.Write(b[:n])
	}
}

func (r *ackCut) downLoop() {
	b := make([]byte, 64<<10)
	for {
		n, err := r.up.Read(b)
		if err != nil {
			return
		}
		if to := r.client.Load(); to != nil && !r.cut.Load() {
			_, _ = r.ln.WriteToUDP(b[:n], to)
		} else {
			r.dropped.Add(1)
		}
	}
}

// TestSubDedupLostAck: the duplicate comes from the network. A spooled MQTT
// over QUIC publisher's message reaches the broker and the subscriber, but
// nothing the broker sends back reaches the publisher, so it never sees
// the PUBACK; once its connection has timed out it connects again and sends
// the message again (the MQTT session's resend or the spool's retry, with
// the first send's stamp), and the broker delivers it a second time. By
// default `quiot sub` prints it once; with --dedup=false twice.
func TestSubDedupLostAck(t *testing.T) {
	for _, tc := range dedupCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			pki := testutil.NewPKI(t)
			s := mqtttest.Start(t, pki, mqttquic.Options{})
			sub := startSubRun(t, ctx, mqtttest.QUICURL(s), pki, tc)

			relay := newAckCut(t, s.QUICAddr())
			prof := quictune.Default()
			prof.MaxIdleTimeout = quictune.Duration(time.Second)             // a connection without answers ends soon,
			prof.KeepAlivePeriod = quictune.Duration(250 * time.Millisecond) // an idle one with answers does not
			pub, err := client.NewSpooled(client.Options{
				Broker: fmt.Sprintf("mqtt-quic://localhost:%d", relay.port()), RootCAs: pki.Pool(), Tuning: prof,
				Reconnect: true, MaxBackoff: 200 * time.Millisecond, Logger: testutil.DiscardLogger(),
			}, spool.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			publish := func(topic, payload string) {
				t.Helper()
				if _, err := pub.Publish(ctx, topic, []byte(payload), client.PublishOptions{QoS: 1}); err != nil {
					t.Fatal(err)
				}
			}
			// Connected, outside the subscriber's filter.
			publish("warm/up", "x")
			if err := pub.Drain(ctx); err != nil {
				t.Fatal(err)
			}

			relay.cut.Store(true)
			publish("dup/x", "0")
			select {
			case <-sub.out.seen: // the broker has it
			case <-ctx.Done():
				t.Fatalf("message 0 not delivered within 90 s:\n%s", sub.errOut)
			}
			select {
			case <-relay.healed: // the publisher dials again
			case <-ctx.Done():
				t.Fatalf("the publisher did not connect again within 90 s (%d datagrams dropped; spool %+v)", relay.dropped.Load(), pub.SpoolStats())
			}
			publish("dup/x", "1")
			publish("dup/x", "2")
			if err := pub.Drain(ctx); err != nil {
				t.Fatalf("drain: %v (spool %+v)", err, pub.SpoolStats())
			}
			sub.check(t, ctx)
			t.Logf("%d datagrams from the broker dropped; spool %+v", relay.dropped.Load(), pub.SpoolStats())
		})
	}
}
