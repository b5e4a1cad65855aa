package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/web"
)

// fakeBridge reports a fixed bridge state to the broker's /v1/stats.
type fakeBridge struct{ s broker.BridgeStatus }

func (f fakeBridge) BridgeStatus() broker.BridgeStatus { return f.s }

// TestBrowserDashboardBridges: the health section lists the broker's
// bridges from /v1/stats (hidden while there are none): a connected one
// with how long it has been up, a degraded one marked so, with its last
// error, and their queued, sent and dropped counts.
func TestBrowserDashboardBridges(t *testing.T) {
	e := start(t, "", web.Options{Dashboard: true})
	b := browser(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := openDashboard(ctx, t, b, e, "/")
	var hidden bool
	if err := p.WaitFor(ctx, `document.getElementById('health').children.length > 0`, `document.getElementById('bridges').hidden`, &hidden); err != nil {
		t.Fatal(err)
	}
	if !hidden {
		t.Error("the bridge table shows on a broker without bridges")
	}
	now := time.Now()
	e.AddBridge(fakeBridge{broker.BridgeStatus{Name: "cloud", URL: "mqtts://cloud.example:8883", Connected: true,
		ConnectedSince: now.Add(-2 * time.Minute), Queued: 3, Sent: 42}})
	e.AddBridge(fakeBridge{broker.BridgeStatus{Name: "hub", URL: "https://hub.example:4433", DownSince: now.Add(-10 * time.Minute),
		Queued: 12345, Dropped: 5, LastError: "dial: connection refused", Degraded: "no upstream connection for 10m0s (down_alert 5m0s)"}})
	var rows []struct{ Name, Class, State, Text string }
	if err := p.WaitFor(ctx, `document.querySelectorAll('#bridges tbody tr').length === 2 && !document.getElementById('bridges').hidden`,
		`Array.from(document.querySelectorAll('#bridges tbody tr'), (r) => ({Name: r.dataset.bridge, Class: r.className, State: r.querySelector('td.state').textContent, Text: r.textContent}))`, &rows); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, r := range rows {
		byName[r.Name] = i
	}
	c, h := rows[byName["cloud"]], rows[byName["hub"]]
	if c.Name != "cloud" || c.State != "up 2m" || c.Class != "" || !strings.Contains(c.Text, "mqtts://cloud.example:8883") || !strings.Contains(c.Text, "42") {
		t.Errorf("cloud row %+v, want up 2m, its URL and 42 sent", c)
	}
	if h.Name != "hub" || h.State != "degraded, down 10m" || h.Class != "bad" || !strings.Contains(h.Text, "dial: connection refused") || !strings.Contains(h.Text, "12.3k") {
		t.Errorf("hub row %+v, want degraded, down 10m, class bad, its last error and 12.3k queued", h)
	}
	screenshot(ctx, t, p, "dashboard-bridges.png")
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
