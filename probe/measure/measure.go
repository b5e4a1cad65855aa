package measure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quiot/quiot/probe/capture"
	"github.com/quiot/quiot/probe/gen"
	"github.com/quiot/quiot/probe/match"
)

// Options says where to measure. Zero values get the documented defaults.
type Options struct {
	// IngressIf and EgressIf are the interfaces to capture on (required):
	// probe packets entering the switch at IngressIf, leaving at EgressIf.
	IngressIf, EgressIf string
	// IngressNamespace and EgressNamespace are the `ip netns` names the
	// capture interfaces live in; "" = the current namespace.
	IngressNamespace, EgressNamespace string
	// IngressDir is the direction of probe packets at IngressIf; default
	// capture.In (the switch port receives them). Use capture.Out when
	// IngressIf is the sending end of a veth pair (the one-pair floor).
	IngressDir capture.Direction
	// EgressDir is the direction at EgressIf; default capture.Out (the switch
	// port transmits them). capture.In for the receiving end of a veth pair.
	EgressDir capture.Direction
	// GenNamespace is where the generator sends from; "" = current.
	GenNamespace string
	// GenInterface, when set, makes the generator inject frames with
	// AF_PACKET on this interface of GenNamespace instead of sending through
	// UDP sockets (higher rates; IPv4; see gen.Options.Interface).
	GenInterface string
	// GenRealTime runs the generator's sender thread with SCHED_FIFO
	// priority (see gen.Options.RealTime): steadier pacing on a busy host.
	GenRealTime bool
	// Dst is the probe destination (required).
	Dst netip.AddrPort
	// SinkNamespace, when set, gets a UDP socket bound to Dst so that no ICMP
	// port unreachable answers the probes. "" = no sink: something at Dst
	// must accept UDP (or the switch must not deliver the packets anywhere).
	SinkNamespace string
	// Drain: after the last packet was sent, the captures keep running until
	// the egress port has been quiet for Drain (default 100 ms; plus the
	// ring's block timeout), at most 10 x Drain: packets still inside the
	// switch after that count as lost.
	Drain time.Duration
	// Hardware asks for NIC hardware timestamps where available.
	Hardware bool
	// RingBlocks overrides the number of ring blocks per capture (of
	// capture's default block size, 128 KiB); default capture's (128).
	RingBlocks int
	// Logger; default discards.
	Logger *slog.Logger
}

// Condition is one point of the sweep.
type Condition struct {
	Size     int           // Ethernet frame bytes (FCS excluded); default 128
	Rate     float64       // packets per second; default 1000
	Flows    int           // distinct flows (source ports); default 1
	Duration time.Duration // measured phase; default 1 s
	Poisson  bool          // Poisson instead of constant spacing
	Burst    int           // back-to-back packets per burst; default 1
	Warmup   time.Duration // sent before Duration, excluded from Delays and counts
	Count    uint64        // stop after this many packets in all (0 = no limit)
	Seed     uint64        // Poisson seed; default 1
}

// Result of one condition. Counts cover the measured phase (after Warmup),
// except the ring drops (whole run) and FirstDelay/FlowFirstDelays.
type Result struct {
	// Delays of the matched packets (egress time - ingress time), in
	// sequence order.
	Delays []time.Duration
	// Seqs are the probe sequence numbers of Delays (same index); a packet's
	// flow is Seq % Flows.
	Seqs []uint64
	// Sent packets; Matched seen at both ports; Lost seen at ingress but not
	// at egress; Duplicated extra egress copies; Reordered out of order at
	// egress within their flow.
	Sent, Matched, Lost, Duplicated, Reordered uint64
	// IngressSeen probe packets seen at the ingress port (Sent - IngressSeen
	// were lost before it or dropped by the ingress ring); EgressOnly seen at
	// egress but never at ingress.
	IngressSeen, EgressOnly uint64
	// IngressRingDrops and EgressRingDrops are the captures' ring drops
	// (PACKET_STATISTICS) over the whole run; non-zero means the delays are
	// incomplete.
	IngressRingDrops, EgressRingDrops uint64
	// SendErrors are failed writes of the generator.
	SendErrors uint64
	// FirstDelay is the delay of the very first probe packet (the cold one:
	// no datapath flow yet); FirstOK is false if it was not matched.
	FirstDelay time.Duration
	FirstOK    bool
	// FlowFirstDelays holds the delay of each flow's first packet, -1 if it
	// was not matched.
	FlowFirstDelays []time.Duration
	// NegativeDelays counts matches with egress before ingress (clock
	// trouble); they are kept in Delays.
	NegativeDelays uint64
	// MaxLate is the generator's worst lateness against its schedule.
	MaxLate time.Duration
	// Hardware is true when the timestamps came from a NIC.
	Hardware bool
	// Unstamped counts captured probe packets (both ports) that carried no
	// kernel skb timestamp, so the ring copy time was used instead (normally
	// 0: the captures turn kernel timestamping on).
	Unstamped uint64
	// Start and End are the first and last send times.
	Start, End time.Time
}

func (o *Options) setDefaults() error {
	if o.IngressIf == "" || o.EgressIf == "" {
		return errors.New("measure: ingress and egress interfaces are required")
	}
	if !o.Dst.IsValid() || o.Dst.Port() == 0 {
		return errors.New("measure: no destination address:port")
	}
	if o.IngressDir == capture.Any {
		o.IngressDir = capture.In
	}
	if o.EgressDir == capture.Any {
		o.EgressDir = capture.Out
	}
	if o.Drain == 0 {
		o.Drain = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// drain returns once nothing was seen for quiet (last holds the time of the
// latest packet), after at most limit, or when ctx is done.
func drain(ctx context.Context, last *atomic.Int64, quiet, limit time.Duration) {
	start := time.Now()
	t := time.NewTicker(quiet / 4)
	defer t.Stop()
	for {
		now := time.Now()
		ref := start
		if l := time.Unix(0, last.Load()); l.After(ref) {
			ref = l
		}
		idle := now.Sub(ref)
		if idle >= quiet || now.Sub(start) >= limit {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// rec is one probe packet seen at a port (24 bytes: a million packets per
// side take 24 MB).
type rec struct {
	seq  uint64
	t    int64 // Unix ns
	flow uint32
}

type side struct {
	last      atomic.Int64 // wall time (Unix ns) the last probe packet was seen
	h         *capture.Handle
	recs      []rec
	hw        bool
	unstamped uint64
	err       error
}

// Run measures one condition. On ctx cancellation it returns what it has and
// ctx's error.
func Run(ctx context.Context, o Options, c Condition) (*Result, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	gopts := gen.Options{
		Dst: o.Dst, Namespace: o.GenNamespace, Interface: o.GenInterface, RealTime: o.GenRealTime, Size: c.Size, Rate: c.Rate, Poisson: c.Poisson,
		Burst: c.Burst, Flows: c.Flows, Warmup: c.Warmup, Duration: c.Duration, Count: c.Count,
		Seed: c.Seed, Logger: o.Logger,
	}
	if err := gopts.Validate(); err != nil {
		return nil, fmt.Errorf("measure: %w", err)
	}
	expect := int(gopts.Rate*(gopts.Warmup+gopts.Duration).Seconds()*1.05) + 1024
	filter := capture.UDPFilter(o.Dst.Port(), capture.DstPort)
	open := func(ifname, ns string, dir capture.Direction) (*side, error) {
		h, err := capture.Open(capture.Options{
			Interface: ifname, Namespace: ns, Direction: dir, Filter: filter,
			SnapLen: 128, Blocks: o.RingBlocks, Hardware: o.Hardware, Logger: o.Logger,
		})
		if err != nil {
			return nil, err
		}
		return &side{h: h, recs: make([]rec, 0, min(expect, 4<<20))}, nil
	}
	in, err := open(o.IngressIf, o.IngressNamespace, o.IngressDir)
	if err != nil {
		return nil, fmt.Errorf("measure: ingress: %w", err)
	}
	defer in.h.Close()
	out, err := open(o.EgressIf, o.EgressNamespace, o.EgressDir)
	if err != nil {
		return nil, fmt.Errorf("measure: egress: %w", err)
	}
	defer out.h.Close()
	if o.SinkNamespace != "" {
		sink, err := gen.NewSink(o.SinkNamespace, o.Dst)
		if err != nil {
			return nil, fmt.Errorf("measure: %w", err)
		}
		defer sink.Close()
	}

	cctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for _, s := range []*side{in, out} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.err = s.h.Run(cctx, func(p *capture.Packet) {
				u, err := match.ParseUDP(p.Data)
				if err != nil {
					return
				}
				hd, err := gen.Decode(u.Payload)
				if err != nil {
					return
				}
				s.hw = s.hw || p.Hardware
				if !p.Stamped {
					s.unstamped++
				}
				s.recs = append(s.recs, rec{seq: hd.Seq, flow: hd.Flow, t: p.Time.UnixNano()})
				s.last.Store(time.Now().UnixNano())
			})
		}()
	}

	gs, gerr := gen.Run(ctx, gopts)
	// Let the last packets cross the switch and their ring blocks retire.
	drain(ctx, &out.last, o.Drain+2*capture.DefaultBlockTimeout, 10*o.Drain)
	stop()
	wg.Wait()
	ist, ierr := in.h.Stats()
	est, eerr := out.h.Stats()
	if err := errors.Join(in.err, out.err, ierr, eerr); err != nil {
		return nil, fmt.Errorf("measure: %w", err)
	}
	if gerr != nil && gs.Sent == 0 {
		return nil, fmt.Errorf("measure: %w", gerr)
	}
	r := analyse(in.recs, out.recs, gs.WarmupSent, gs.Seqs, gopts.Flows)
	r.Sent = gs.Sent - gs.WarmupSent
	r.SendErrors = gs.Errors
	r.MaxLate = gs.MaxLate
	r.Start, r.End = gs.Start, gs.End
	r.IngressRingDrops, r.EgressRingDrops = ist.Drops, est.Drops
	r.Hardware = in.hw && out.hw
	r.Unstamped = in.unstamped + out.unstamped
	if r.IngressRingDrops > 0 || r.EgressRingDrops > 0 {
		o.Logger.Warn("capture ring drops: delays are incomplete",
			"ingress", o.IngressIf, "ingress_drops", r.IngressRingDrops,
			"egress", o.EgressIf, "egress_drops", r.EgressRingDrops)
	}
	if gs.Errors > 0 {
		o.Logger.Warn("generator write errors", "errors", gs.Errors, "first", gs.FirstError)
	}
	o.Logger.Debug("condition measured", "size", gopts.Size, "rate", gopts.Rate, "flows", gopts.Flows,
		"sent", r.Sent, "matched", r.Matched, "lost", r.Lost, "dup", r.Duplicated, "reordered", r.Reordered)
	return r, gerr
}

// analyse matches the captured records offline. Sequence numbers are dense
// (0..nseq-1), so it indexes arrays by sequence instead of hashing: the
// measured phase is seq in [warm, nseq); the first packet of each flow (seq
// < flows) is matched apart for the cold delays. Records with a sequence
// outside [0, nseq) are not this run's and are ignored. Egress records are
// taken in capture (transmission) order for the reorder count.
func analyse(ins, outs []rec, warm, nseq uint64, flows int) *Result {
	r := &Result{FlowFirstDelays: make([]time.Duration, flows)}
	if warm > nseq {
		warm = nseq
	}
	n := nseq - warm
	inT := make([]int64, n)
	outT := make([]int64, n)
	firstIn := make([]int64, flows)
	firstOut := make([]int64, flows)
	var seen uint64
	for _, x := range ins {
		if x.seq < uint64(flows) && firstIn[x.seq] == 0 {
			firstIn[x.seq] = x.t
		}
		if x.seq < warm || x.seq >= nseq {
			continue
		}
		if i := x.seq - warm; inT[i] == 0 {
			inT[i] = x.t
			seen++
		}
	}
	maxSeq := make([]uint64, flows) // per flow: highest egress seq + 1
	for _, x := range outs {
		if x.seq < uint64(flows) && firstOut[x.seq] == 0 {
			firstOut[x.seq] = x.t
		}
		if x.seq < warm || x.seq >= nseq {
			continue
		}
		i := x.seq - warm
		switch {
		case inT[i] == 0:
			r.EgressOnly++
			continue
		case outT[i] != 0:
			r.Duplicated++
			continue
		}
		outT[i] = x.t
		r.Matched++
		f := x.seq % uint64(flows)
		if x.seq+1 < maxSeq[f] {
			r.Reordered++
		} else {
			maxSeq[f] = x.seq + 1
		}
	}
	r.IngressSeen = seen
	r.Lost = seen - r.Matched
	r.Delays = make([]time.Duration, 0, r.Matched)
	r.Seqs = make([]uint64, 0, r.Matched)
	for i := range inT {
		if inT[i] == 0 || outT[i] == 0 {
			continue
		}
		d := time.Duration(outT[i] - inT[i])
		if d < 0 {
			r.NegativeDelays++
		}
		r.Delays = append(r.Delays, d)
		r.Seqs = append(r.Seqs, warm+uint64(i))
	}
	for f := range r.FlowFirstDelays {
		if firstIn[f] != 0 && firstOut[f] != 0 {
			r.FlowFirstDelays[f] = time.Duration(firstOut[f] - firstIn[f])
		} else {
			r.FlowFirstDelays[f] = -1
		}
	}
	if len(r.FlowFirstDelays) > 0 && r.FlowFirstDelays[0] >= 0 {
		r.FirstDelay, r.FirstOK = r.FlowFirstDelays[0], true
	}
	return r
}
