package bridge_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/testutil"
)

// TestManagerReload: Reload keeps an unchanged bridge running (the same
// connection, the messages it holds for an unreachable upstream), stops a
// removed one, restarts a changed one with its new table and starts an
// added one; the edge's messages then go up over exactly the new set.
func TestManagerReload(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquitto(t, pki, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := mq.sub(ctx, t, "#")
	nowhere := freePort(t)
	table := func(name, prefix, port string) string {
		return fmt.Sprintf(`
[[bridge]]
name          = %q
url           = "mqtt://127.0.0.1:%s"
out           = ["sensors/#"]
remote_prefix = %q
username      = %q
password      = %q
reconnect_min = "50ms"
reconnect_max = "1s"
`, name, port, prefix, upUser, upPass)
	}
	parse := func(tables ...string) []bridge.Config {
		cs, err := bridge.Parse([]byte(strings.Join(tables, "")))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	m := bridge.NewManager(edge.Broker, testLogger(t))
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	byName := func() map[string]*bridge.Bridge {
		r := map[string]*bridge.Bridge{}
		for _, br := range m.Bridges() {
			r[br.Name()] = br
		}
		return r
	}
	connected := func(names ...string) {
		t.Helper()
		bs := byName()
		for _, n := range names {
			if err := bs[n].WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
				t.Fatalf("bridge %s never connected", n)
			}
		}
	}
	// upstream reads n lines and returns them sorted.
	upstream := func(n int) []string {
		t.Helper()
		var got []string
		for range n {
			got = append(got, up.next(ctx, t, "a bridged message"))
		}
		slices.Sort(got)
		return got
	}

	if err := m.Reload(ctx, parse(table("a", "a/", mq.port), table("b", "b/", mq.port), table("c", "c/", mq.port), table("q", "q/", nowhere))); err != nil {
		t.Fatal(err)
	}
	connected("a", "b", "c")
	publish(ctx, t, edge.Broker, "sensors/1", "one", false)
	if got, want := upstream(3), []string{"a/sensors/1 one", "b/sensors/1 one", "c/sensors/1 one"}; !slices.Equal(got, want) {
		t.Fatalf("upstream got %q, want %q", got, want)
	}
	before := byName()
	if s := before["q"].Stats(); s.Queued != 1 {
		t.Fatalf("q: %+v, want one message queued", s)
	}

	if err := m.Reload(ctx, parse(table("a", "a/", mq.port), table("c", "c2/", mq.port), table("q", "q/", nowhere), table("d", "d/", mq.port))); err != nil {
		t.Fatal(err)
	}
	after := byName()
	if len(after) != 4 || after["b"] != nil {
		t.Fatalf("running after the reload: %v, want a, c, q, d", slices.Collect(func(yield func(string) bool) {
			for n := range after {
				yield(n)
			}
		}))
	}
	if after["a"] != before["a"] || after["q"] != before["q"] {
		t.Fatal("an unchanged bridge was restarted")
	}
	if s := after["a"].Stats(); !s.Connected || s.Connects != 1 {
		t.Fatalf("a: %+v, want its first connection still up", s)
	}
	if s := after["q"].Stats(); s.Queued != 1 {
		t.Fatalf("q: %+v, want its queued message kept", s)
	}
	if after["c"] == before["c"] {
		t.Fatal("the changed bridge c was not restarted")
	}
	if s := before["b"].Stats(); s.Connected {
		t.Fatalf("removed bridge b still connected: %+v", s)
	}
	connected("c", "d")
	for i := 2; i <= 3; i++ {
		publish(ctx, t, edge.Broker, fmt.Sprintf("sensors/%d", i), "x", false)
		want := []string{fmt.Sprintf("a/sensors/%d x", i), fmt.Sprintf("c2/sensors/%d x", i), fmt.Sprintf("d/sensors/%d x", i)}
		if got := upstream(3); !slices.Equal(got, want) {
			t.Fatalf("upstream got %q, want %q (the removed b or the old c still forwarding?)", got, want)
		}
	}
	if s := after["q"].Stats(); s.Queued != 3 {
		t.Fatalf("q: %+v, want 3 queued", s)
	}
}
