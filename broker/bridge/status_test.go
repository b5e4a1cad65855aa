package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/testutil"
)

// TestBridgeStateInStatsAndHealthz: each bridge's state (connected, since,
// queued messages and bytes, sent, dropped, last error) is in the broker's
// Stats and GET /v1/stats, and /healthz says "degraded", naming the
// bridge, once a bridge has been without an upstream for its down_alert;
// a bridge down for less than its down_alert and a connected one do not
// degrade it, and a closed bridge leaves both.
func TestBridgeStateInStatsAndHealthz(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := auth.Parse([]byte(edgeACL + "\n[[user]]\nname = \"ops\"\npassword = \"ops-pw\"\nsubscribe = [\"$SYS/#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	edge := brokertest.Start(t, pki, &broker.Options{Auth: a, Web: &web.Options{}})
	up := brokertest.Start(t, pki, nil)
	ms := mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker})
	caFile := pki.CAFile(t)
	dead := freePort(t)
	peer := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name    = "peer"
url     = "mqtt-quic://localhost:%d"
ca_file = %q
out     = ["sensors/#"]
`, ms.QUICAddr().(*net.UDPAddr).Port, caFile)))
	nowhere := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "nowhere"
url           = "mqtt://127.0.0.1:%s"
out           = ["sensors/#"]
reconnect_min = "50ms"
reconnect_max = "50ms"
down_alert    = "10ms"
`, dead)))
	patient := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "patient"
url           = "mqtt://127.0.0.1:%s"
out           = ["other/#"]
reconnect_min = "50ms"
reconnect_max = "50ms"
`, dead)))
	if err := peer.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
		t.Fatalf("peer never connected: %+v", peer.Stats())
	}
	publish(ctx, t, edge.Broker, "sensors/a", "12345", false)
	if err := peer.WaitFor(ctx, func(s bridge.Stats) bool { return s.Sent == 1 }); err != nil {
		t.Fatal(err)
	}
	// Two failed attempts 50ms apart: nowhere has been down for more than
	// its 10ms down_alert, patient for far less than its 5m.
	for _, br := range []*bridge.Bridge{nowhere, patient} {
		if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.ConnectFailures >= 2 }); err != nil {
			t.Fatal(err)
		}
	}

	st := edge.Broker.Stats().Bridges
	if len(st) != 3 || st[0].Name != "nowhere" || st[1].Name != "patient" || st[2].Name != "peer" {
		t.Fatalf("Stats().Bridges = %+v, want nowhere, patient, peer", st)
	}
	if p := st[2]; !p.Connected || p.ConnectedSince.IsZero() || p.Sent != 1 || p.Degraded != "" || !p.DownSince.IsZero() {
		t.Fatalf("peer %+v: want connected, since set, 1 sent, not degraded", p)
	}
	if n := st[0]; n.Connected || n.Queued != 1 || n.QueuedBytes == 0 || n.LastError == "" || n.DownSince.IsZero() || !strings.Contains(n.Degraded, "down_alert 10ms") {
		t.Fatalf("nowhere %+v: want down, 1 queued, a last error, degraded", n)
	}
	if p := st[1]; p.Connected || p.Degraded != "" {
		t.Fatalf("patient %+v: want down, not degraded (5m down_alert)", p)
	}

	hc := testutil.H3Client(pki.Pool(), nil)
	get := func(path string, user string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, edge.URL+path, nil)
		if user != "" {
			req.SetBasicAuth(user, user+"-pw")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return string(b)
	}
	h := get("/healthz", "")
	if !strings.HasPrefix(h, "degraded\nbridge nowhere: no upstream connection for ") || strings.Contains(h, "patient") || strings.Contains(h, "peer") {
		t.Fatalf("/healthz:\n%s\nwant degraded, naming bridge nowhere only", h)
	}
	var reply struct {
		Broker struct{ Bridges []broker.BridgeStatus }
	}
	body := get("/v1/stats", "ops")
	if err := json.Unmarshal([]byte(body), &reply); err != nil {
		t.Fatal(err)
	}
	if b := reply.Broker.Bridges; len(b) != 3 || b[2].Name != "peer" || !b[2].Connected || b[2].Sent != 1 || b[0].Queued != 1 || b[0].Degraded == "" {
		t.Fatalf("/v1/stats bridges: %s", body)
	}

	// Closed, a bridge leaves /healthz and Stats.
	if err := nowhere.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if h := get("/healthz", ""); h != "ok\n" {
		t.Fatalf("/healthz after closing the degraded bridge: %q, want ok", h)
	}
	if n := len(edge.Broker.Stats().Bridges); n != 2 {
		t.Fatalf("%d bridges in Stats after a Close, want 2", n)
	}
}
