//go:build linux

package watch_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/gen"
	"github.com/quiot/quiot/probe/netns/netnstest"
	"github.com/quiot/quiot/probe/watch"
)

// TestWatchTimesTraffic watches the bridge path while UDP traffic to port
// 4433 crosses it and checks the live lines and the summary.
func TestWatchTimesTraffic(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	dst := netip.AddrPortFrom(p.Dst, 4433)
	sink, err := gen.NewSink(p.SinkNS, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	var out bytes.Buffer
	type res struct {
		s   *watch.Summary
		err error
	}
	ch := make(chan res, 1)
	ready := make(chan struct{})
	go func() {
		s, err := watch.Run(context.Background(), watch.Options{IngressIf: p.Ingress, EgressIf: p.Egress,
			Filter: "udp:4433", Duration: 900 * time.Millisecond, Interval: 200 * time.Millisecond, Out: &out,
			OnReady: func() { close(ready) }})
		ch <- res{s, err}
	}()
	select {
	case <-ready:
	case r := <-ch:
		t.Fatalf("watch ended before it was ready: %v", r.err)
	}
	st, err := gen.Run(context.Background(), gen.Options{Dst: dst, Namespace: p.GenNS, Rate: 2000, Duration: 500 * time.Millisecond, Flows: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	t.Logf("output:\n%s\nsummary: %+v", out.String(), r.s)
	if r.err != nil {
		t.Fatal(r.err)
	}
	s := r.s
	if s.Matched != st.Sent || s.Lost != 0 || s.IngressPackets != st.Sent || s.P50 <= 0 || s.Max < s.P50 {
		t.Errorf("summary %+v, sent %d", s, st.Sent)
	}
	if n := strings.Count(out.String(), "p50"); n < 2 {
		t.Errorf("%d lines with percentiles", n)
	}
}

func TestWatchNoTraffic(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	_, err := watch.Run(context.Background(), watch.Options{IngressIf: p.Ingress, EgressIf: p.Egress,
		Duration: 200 * time.Millisecond})
	if !errors.Is(err, watch.ErrNoTraffic) || !strings.Contains(err.Error(), p.Ingress) || !strings.Contains(err.Error(), p.Egress) {
		t.Fatalf("err = %v, want ErrNoTraffic naming both interfaces", err)
	}
	t.Log(err)
}

func TestWatchBadInput(t *testing.T) {
	netnstest.NeedRoot(t)
	for name, o := range map[string]watch.Options{
		"filter":    {IngressIf: "lo", EgressIf: "lo", Filter: "tcp:80"},
		"interface": {IngressIf: "nosuch0", EgressIf: "lo"},
		"missing":   {IngressIf: "lo"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := watch.Run(context.Background(), o); err == nil {
				t.Fatal("no error")
			} else {
				t.Log(err)
			}
		})
	}
}
