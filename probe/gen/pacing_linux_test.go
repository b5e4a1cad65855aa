//go:build linux

package gen_test

import (
	"context"
	"github.com/quiot/quiot/probe/netns/netnstest"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/capture"
	"github.com/quiot/quiot/probe/gen"
)

// BenchmarkPacing sends at a set rate from the generator namespace and times
// the packets where they arrive (kernel timestamps at the peer veth end). It
// reports the achieved rate, the coefficient of variation of the gaps (0 for
// constant, 1 for Poisson) and, for constant spacing, the p99 deviation of a
// gap from the nominal one. Run with -benchtime=1x.
func BenchmarkPacing(b *testing.B) {
	netnstest.NeedRoot(b)
	for _, tc := range []struct {
		name    string
		rate    float64
		poisson bool
		rt      bool
	}{
		{"constant-1k", 1000, false, false}, {"constant-10k", 10000, false, false}, {"constant-20k", 20000, false, false},
		{"poisson-1k", 1000, true, false}, {"poisson-10k", 10000, true, false},
		{"constant-1k-rt", 1000, false, true}, {"constant-10k-rt", 10000, false, true}, {"poisson-10k-rt", 10000, true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := netnstest.NewPath(b, true)
			dst := netip.AddrPortFrom(p.Dst, 9600)
			sink, err := gen.NewSink(p.SinkNS, dst)
			if err != nil {
				b.Fatal(err)
			}
			defer sink.Close()
			h, err := capture.Open(capture.Options{Interface: p.Ingress, Direction: capture.In, Filter: capture.UDPFilter(9600, capture.DstPort)})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			var ts []time.Time
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = h.Run(ctx, func(pk *capture.Packet) { ts = append(ts, pk.Time) }) }()
			var st gen.Stats
			for b.Loop() {
				st, err = gen.Run(context.Background(), gen.Options{Dst: dst, Namespace: p.GenNS, Rate: tc.rate, Poisson: tc.poisson, RealTime: tc.rt, Size: 128, Duration: time.Second})
				if err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond)
			cancel()
			<-done
			if len(ts) < 10 {
				b.Fatalf("captured %d packets", len(ts))
			}
			gaps := make([]float64, len(ts)-1)
			var mean float64
			for i := range gaps {
				gaps[i] = ts[i+1].Sub(ts[i]).Seconds()
				mean += gaps[i]
			}
			mean /= float64(len(gaps))
			var v float64
			dev := make([]float64, len(gaps))
			nominal := 1 / tc.rate
			for i, g := range gaps {
				v += (g - mean) * (g - mean)
				dev[i] = math.Abs(g - nominal)
			}
			slices.Sort(dev)
			b.ReportMetric(float64(len(ts))/ts[len(ts)-1].Sub(ts[0]).Seconds(), "pps")
			b.ReportMetric(math.Sqrt(v/float64(len(gaps)))/mean, "gap_cv")
			b.ReportMetric(float64(st.MaxLate)/1e3, "maxlate_us")
			if !tc.poisson {
				b.ReportMetric(dev[len(dev)*99/100]*1e6, "p99_gap_dev_us")
				b.ReportMetric(dev[len(dev)/2]*1e6, "p50_gap_dev_us")
			}
		})
	}
}
