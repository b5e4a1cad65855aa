package gen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"time"
)

// Options configures Run. Zero values get the documented defaults.
type Options struct {
	// Dst is the UDP destination (required). Run a sink there (NewSink) so
	// that no ICMP port unreachable comes back.
	Dst netip.AddrPort
	// Namespace is the `ip netns` name to send from; "" = current.
	Namespace string
	// Size is the Ethernet frame size in bytes (headers included, FCS
	// excluded); default 128; 62..1514 for IPv4, 82..1514 for IPv6.
	Size int
	// Rate in packets per second; default 1000.
	Rate float64
	// Poisson spaces bursts by exponential gaps instead of constant ones.
	Poisson bool
	// Burst sends this many packets back to back; default 1.
	Burst int
	// Flows is the number of distinct flows (source ports); default 1.
	// Packets go to the flows in turn.
	Flows int
	// Warmup is sent before Duration; its packets are counted apart.
	Warmup time.Duration
	// Duration of the measured phase; default 1 s. Count may end it sooner.
	Duration time.Duration
	// Count stops after this many packets in all (0 = no limit).
	Count uint64
	// Seed for the Poisson gaps; default 1.
	Seed uint64
	// Interface, when set, makes the generator inject complete Ethernet
	// frames with an AF_PACKET socket on this interface (in Namespace),
	// bypassing the UDP/IP stack and the qdisc, in batches (sendmmsg) when
	// behind schedule: several times the rate a UDP socket reaches. IPv4
	// only; source address from the interface; source ports 40000+flow;
	// destination MAC from DstMAC or the namespace's neighbour table (ARP).
	Interface string
	// DstMAC is the next hop's MAC for Interface; default: looked up.
	DstMAC net.HardwareAddr
	// RealTime runs the sender thread with SCHED_FIFO priority (root) so
	// that its wake-ups are not delayed by other busy tasks; the kernel's RT
	// throttling still leaves other tasks 5 % of the CPU it spins on.
	RealTime bool
	// Spin is how close to a deadline the sender busy-waits instead of
	// sleeping; default 200 µs.
	Spin time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// Validate applies the defaults to o and checks it.
func (o *Options) Validate() error { return o.setDefaults() }

func (o *Options) setDefaults() error {
	if !o.Dst.IsValid() || o.Dst.Port() == 0 {
		return errors.New("generator: no destination address:port")
	}
	if o.Size == 0 {
		o.Size = 128
	}
	if _, err := PayloadLen(o.Size, o.Dst.Addr()); err != nil {
		return fmt.Errorf("generator: %w", err)
	}
	if o.Rate == 0 {
		o.Rate = 1000
	}
	if o.Rate < 0 || o.Rate > 10e6 {
		return fmt.Errorf("generator: rate %g pps out of range (0, 1e7]", o.Rate)
	}
	if o.Burst == 0 {
		o.Burst = 1
	}
	if o.Burst < 0 {
		return fmt.Errorf("generator: burst %d < 1", o.Burst)
	}
	if o.Flows == 0 {
		o.Flows = 1
	}
	if o.Flows < 0 || o.Flows > 60000 {
		return fmt.Errorf("generator: flows %d out of range 1..60000", o.Flows)
	}
	if o.Duration == 0 {
		o.Duration = time.Second
	}
	if o.Duration < 0 || o.Warmup < 0 {
		return errors.New("generator: negative duration or warmup")
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Spin == 0 {
		o.Spin = 200 * time.Microsecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats describe what Run sent.
type Stats struct {
	Sent       uint64 // packets written, warmup included
	WarmupSent uint64 // packets of the warmup phase: sequence numbers 0..WarmupSent-1
	Errors     uint64 // failed writes (not counted in Sent; their sequence numbers are skipped)
	FirstError error  // the first write error, if any
	Seqs       uint64 // sequence numbers used: 0..Seqs-1 (Sent + Errors)
	MaxLate    time.Duration
	Start, End time.Time // first and last send
	Flows      []netip.AddrPort
}

// Run sends the probe stream and returns when Warmup+Duration have passed,
// Count packets were sent, or ctx is done (then with what was sent and
// ctx's error).
func Run(ctx context.Context, o Options) (Stats, error) {
	if err := o.setDefaults(); err != nil {
		return Stats{}, err
	}
	plen, _ := PayloadLen(o.Size, o.Dst.Addr())
	snd, err := openSender(o, plen)
	if err != nil {
		return Stats{}, err
	}
	defer snd.close()
	st := Stats{Flows: snd.sources()}
	sched := Schedule{Rate: o.Rate, Burst: o.Burst, Poisson: o.Poisson, Rand: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
	// The sender runs on its own locked OS thread, which is never unlocked:
	// the thread, with its timer slack and scheduling policy, ends with the
	// goroutine.
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		runtime.LockOSThread()
		if err := tuneThread(o.RealTime); err != nil {
			o.Logger.Warn("sender thread tuning failed", "err", err)
		}

		start := time.Now()
		warmEnd := start.Add(o.Warmup)
		end := warmEnd.Add(o.Duration)
		next := start
		var seq uint64
		flows := make([]uint32, 0, maxBatch)
		for i := 0; ; i++ {
			if !next.Before(end) || (o.Count > 0 && seq >= o.Count) {
				break
			}
			if i&255 == 0 && ctx.Err() != nil {
				break
			}
			late := wait(ctx, next, o.Spin)
			if ctx.Err() != nil {
				break
			}
			st.MaxLate = max(st.MaxLate, late)
			now := time.Now()
			if !now.Before(end) {
				break // behind schedule at the end: stop on time, not on count
			}
			// Every packet already due goes out now, in one batch where the
			// sender can (sendmmsg on the injector).
			flows = flows[:0]
			for len(flows) < maxBatch && !next.After(now) && next.Before(end) && (o.Count == 0 || seq < o.Count) {
				flow := uint32(seq % uint64(o.Flows))
				_ = Encode(snd.payload(len(flows)), Header{Seq: seq, Flow: flow, Sent: now})
				flows = append(flows, flow)
				if next.Before(warmEnd) {
					st.WarmupSent = seq + 1
				}
				seq++
				next = next.Add(sched.Next())
			}
			st.Seqs = seq
			n, err := snd.send(flows)
			if n > 0 {
				if st.Sent == 0 {
					st.Start = now
				}
				st.Sent += uint64(n)
				st.End = now
			}
			if failed := len(flows) - n; failed > 0 {
				st.Errors += uint64(failed)
				if st.FirstError == nil {
					st.FirstError = err
					o.Logger.Warn("send failed", "dst", o.Dst, "err", err)
				}
			}
		}
	}()
	<-finished
	if st.Sent == 0 && st.Errors > 0 {
		return st, fmt.Errorf("generator: every send to %s failed: %w", o.Dst, st.FirstError)
	}
	return st, ctx.Err()
}

// openSender opens the injector or the UDP flows (a variable for tests).
var openSender = func(o Options, plen int) (sender, error) {
	if o.Interface != "" {
		return openInjector(o, plen)
	}
	return openFlows(o.Namespace, o.Dst, o.Flows, plen)
}

// maxBatch bounds the packets sent in one go when the sender is behind.
const maxBatch = 64

// sender writes probe packets: payload(i) is the payload buffer of batch
// slot i; send transmits slots 0..len(flows)-1 on their flows and returns
// how many went out and the first error.
type sender interface {
	payload(i int) []byte
	send(flows []uint32) (int, error)
	sources() []netip.AddrPort
	close()
}

// wait returns at deadline (or when ctx is done during a long wait). Long
// waits sleep on a Go timer (millisecond granularity) until 10 ms before the
// deadline, then a high-resolution sleep (clock_nanosleep with 1 ns timer
// slack on Linux) brings it to spin before the deadline, and it busy-waits
// the rest. It returns how late it already was.
func wait(ctx context.Context, deadline time.Time, spin time.Duration) time.Duration {
	d := time.Until(deadline)
	if d <= 0 {
		return -d
	}
	if d > 20*time.Millisecond {
		t := time.NewTimer(d - 10*time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0
		}
		d = time.Until(deadline)
	}
	if d > spin {
		preciseSleep(d - spin)
	}
	for time.Now().Before(deadline) {
	}
	return 0
}
