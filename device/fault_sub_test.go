package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/testutil/mqtttest"
)

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
				url = testutil.StartBroker(t, pki, nil).URL
			} else {
				url = mqtttest.QUICURL(mqtttest.Start(t, pki, mqttquic.Options{}))
			}
			ca := filepath.Join(t.TempDir(), "ca.pem")
			if err := os.WriteFile(ca, pki.CA.CertPEM(), 0o644); err != nil {
				t.Fatal(err)
			}
			pub, err := client.New(client.Options{Broker: url, RootCAs: pki.Pool(), Logger: testutil.DiscardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			for _, tt := range []struct {
				name    string
				flags   []string
				want    string // the payloads printed, one a line
				summary string
				dropped string // the summary's note of dropped duplicates ("": none)
			}{
				{"default", nil, "0\n1\n2\n", "received 3 message(s) on dup/#", "; 1 duplicate(s) dropped"},
				{"off", []string{"--dedup=false"}, "0\n0\n1\n2\n", "received 4 message(s) on dup/#", ""},
			} {
				t.Run(tt.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					topic := "dup/" + tt.name
					out, errOut := newSyncBuffer(""), newSyncBuffer("msg=subscribed")
					done := make(chan error, 1)
					args := append([]string{"--config", "", "--broker", url, "--ca", ca, "--topic", "dup/#", "--format", "raw",
						"--count", fmt.Sprint(strings.Count(tt.want, "\n"))}, tt.flags...)
					go func() { done <- runSub(ctx, args, out, errOut) }()
					select {
					case <-errOut.seen:
					case err := <-done:
						t.Fatalf("sub ended before subscribing: %v\n%s", err, errOut)
					case <-ctx.Done():
						t.Fatalf("sub not subscribed within 60 s:\n%s", errOut)
					}
					sent := time.Now()
					for i, p := range []string{"0", "0", "1", "2"} {
						// The second "0" is the resend: the first one's stamp.
						stamp := sent.Add(time.Duration(max(i-1, 0)) * time.Millisecond)
						if _, err := pub.Publish(ctx, topic, []byte(p+"\n"), client.PublishOptions{QoS: 1, Sent: stamp}); err != nil {
							t.Fatalf("publish %d: %v", i, err)
						}
					}
					select {
					case err := <-done:
						if err != nil {
							t.Fatalf("sub: %v\n%s", err, errOut)
						}
					case <-ctx.Done():
						t.Fatalf("sub did not end after --count; printed %q\n%s", out, errOut)
					}
					if out.String() != tt.want {
						t.Errorf("sub printed %q, want %q", out, tt.want)
					}
					if e := errOut.String(); !strings.Contains(e, tt.summary) || strings.Contains(e, "dropped") != (tt.dropped != "") || !strings.Contains(e, tt.dropped) {
						t.Errorf("summary: want %q and %q in\n%s", tt.summary, tt.dropped, e)
					}
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
