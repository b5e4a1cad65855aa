package netimpair

import (
	"net"
	"slices"
	"testing"
	"time"
)

// BenchmarkRelayForward measures the relay's forwarding throughput: bursts
// of 32 datagrams of 1200 bytes from a client, through the relay, to a
// sink that reads them all before the next burst. "direct" is the same
// without the relay, for comparison.
func BenchmarkRelayForward(b *testing.B) {
	const burst, size = 32, 1200
	for _, mode := range []string{"direct", "relay", "relay+loss1%+jitter"} {
		b.Run(mode, func(b *testing.B) {
			sink := listen(b)
			var dst net.Addr = sink.LocalAddr()
			var r *Relay
			switch mode {
			case "relay":
				r = startRelay(b, sink.LocalAddr(), Options{})
			case "relay+loss1%+jitter":
				// Jitter without reordering, tiny so the benchmark measures
				// the machinery, not the wait.
				r = startRelay(b, sink.LocalAddr(), Options{Up: Direction{LossPct: 1, Jitter: 10 * time.Microsecond}})
			}
			if r != nil {
				dst = r.Addr()
			}
			cli := listen(b)
			buf, rbuf := make([]byte, size), make([]byte, 2000)
			var sent, forwarded uint64
			b.SetBytes(burst * size)
			for b.Loop() {
				for range burst {
					if _, err := cli.WriteTo(buf, dst); err != nil {
						b.Fatal(err)
					}
				}
				want := burst
				if r != nil {
					// Read what the link lets through: the burst minus
					// the datagrams the emulated loss dropped.
					for {
						s := r.Stats().Up
						if s.Received == sent+burst && s.Forwarded+s.Dropped() == s.Received {
							want = int(s.Forwarded - forwarded)
							forwarded = s.Forwarded
							break
						}
						time.Sleep(20 * time.Microsecond)
					}
					sent += burst
				}
				for range want {
					sink.SetReadDeadline(time.Now().Add(5 * time.Second))
					if _, _, err := sink.ReadFrom(rbuf); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*burst)/b.Elapsed().Seconds(), "datagrams/s")
		})
	}
}

// BenchmarkRelayDelay measures how far the relay's one-way delay exceeds
// the configured 20 ms, in the median (target: within 1 ms on a quiet host).
func BenchmarkRelayDelay(b *testing.B) {
	const up, down = 20 * time.Millisecond, 5 * time.Millisecond
	var excess []float64
	for range b.N {
		ows, _ := measureDelay(b, up, down)
		slices.Sort(ows)
		excess = append(excess, float64(ows[len(ows)/2]-up)/float64(time.Microsecond))
	}
	slices.Sort(excess)
	b.ReportMetric(excess[len(excess)/2], "excess_median_us")
}

// BenchmarkRelayRate measures the rate a link set to 8000 kbit/s delivers
// (target: within 5 % on a quiet host).
func BenchmarkRelayRate(b *testing.B) {
	const kbit = 8000.0
	var errs []float64
	for range b.N {
		rate, _ := measureRate(b, kbit)
		errs = append(errs, (rate-kbit)/kbit*100)
	}
	slices.Sort(errs)
	b.ReportMetric(errs[len(errs)/2], "rate_error_pct")
}
