//go:build linux

package gen_test

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/gen"
	"github.com/quiot/quiot/probe/netns"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s not installed", tool)
		}
	}
}

func path(t testing.TB) *netns.Path {
	p, err := netns.NewPath(netns.PathOptions{Bridge: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func TestRunInNamespace(t *testing.T) {
	needRoot(t)
	p := path(t)
	dst := netip.AddrPortFrom(p.Dst, 9100)
	sink, err := gen.NewSink(p.SinkNS, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	st, err := gen.Run(context.Background(), gen.Options{Dst: dst, Namespace: p.GenNS, Rate: 5000, Flows: 3,
		Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond, Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent < 400 || st.Errors != 0 || st.WarmupSent == 0 || st.WarmupSent >= st.Sent || len(st.Flows) != 3 {
		t.Errorf("stats %+v", st)
	}
	seen := map[netip.AddrPort]bool{}
	for _, f := range st.Flows {
		if f.Addr() != p.Src || seen[f] {
			t.Errorf("flow source %v (want %v, distinct)", f, p.Src)
		}
		seen[f] = true
	}
}

func TestRunNoSink(t *testing.T) {
	needRoot(t)
	p := path(t)
	// Nothing listens: ICMP port unreachable makes later writes fail; the
	// generator counts the errors instead of stopping.
	st, err := gen.Run(context.Background(), gen.Options{Dst: netip.AddrPortFrom(p.Dst, 9101), Namespace: p.GenNS,
		Rate: 2000, Duration: 50 * time.Millisecond})
	t.Logf("sent %d errors %d first %v err %v", st.Sent, st.Errors, st.FirstError, err)
	if st.Errors == 0 {
		t.Error("no write errors without a sink")
	}
}

func TestRunBadNamespace(t *testing.T) {
	needRoot(t)
	_, err := gen.Run(context.Background(), gen.Options{Dst: netip.MustParseAddrPort("10.0.0.1:9"), Namespace: "no-such-ns-x"})
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
}

// BenchmarkMaxRate reports the highest rate the generator reaches from a
// namespace through a veth pair and a bridge into a non-reading sink.
func BenchmarkMaxRate(b *testing.B) {
	needRoot(b)
	p := path(b)
	dst := netip.AddrPortFrom(p.Dst, 9102)
	sink, err := gen.NewSink(p.SinkNS, dst)
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	var st gen.Stats
	for b.Loop() {
		st, err = gen.Run(context.Background(), gen.Options{Dst: dst, Namespace: p.GenNS, Rate: 5e6, Size: 64, Duration: time.Second})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.Sent)/st.End.Sub(st.Start).Seconds(), "pps")
}
