// Package watch times real traffic crossing a switch: it captures at an
// ingress and an egress interface, matches packets by a hash of their UDP
// payload (passive mode; QUIC payloads are unique), and prints live delay
// percentiles and loss counters every interval.
package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/quiot/quiot/probe/capture"
	"github.com/quiot/quiot/probe/match"
)

// Options configures Run. Zero values get the documented defaults.
type Options struct {
	// IngressIf and EgressIf are the interfaces (required): packets entering
	// the switch at IngressIf (received there) and leaving at EgressIf
	// (transmitted there) are timed; the reverse direction is not.
	IngressIf, EgressIf string
	// IngressNamespace and EgressNamespace are `ip netns` names; "" = current.
	IngressNamespace, EgressNamespace string
	// Filter selects the traffic: "udp", "udp:PORT" (either port),
	// "udp:dst:PORT", "udp:src:PORT"; default "udp:4433".
	Filter string
	// Duration to watch; 0 = until ctx is done. Either interface seeing no
	// matching traffic by the end is an error (ErrNoTraffic).
	Duration time.Duration
	// Interval between output lines; default 1 s.
	Interval time.Duration
	// Horizon after which a packet seen at ingress but not at egress counts
	// as lost (and an egress packet never seen at ingress as egress-only);
	// default 1 s.
	Horizon time.Duration
	// OnReady, if set, is called once both captures are bound (traffic from
	// then on is seen).
	OnReady func()
	// Out receives the lines; default io.Discard.
	Out io.Writer
	// Logger; default discards.
	Logger *slog.Logger
}

// ErrNoTraffic is returned when an interface saw no matching packet.
var ErrNoTraffic = errors.New("no matching traffic")

// Summary is the outcome of a watch.
type Summary struct {
	match.Counts
	IngressPackets, EgressPackets uint64 // packets captured on each side
	// Unsettled are packets seen on one side within Horizon of the end,
	// still waiting for the other side: neither lost nor matched.
	Unsettled                         uint64
	IngressRingDrops, EgressRingDrops uint64
	P50, P99, P999, Min, Max          time.Duration // over all matched packets
}

func (o *Options) setDefaults() (capture.Filter, error) {
	if o.IngressIf == "" || o.EgressIf == "" {
		return nil, errors.New("watch: ingress and egress interfaces are required")
	}
	if o.Filter == "" {
		o.Filter = "udp:4433"
	}
	f, _, err := capture.ParseFilter(o.Filter)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	if o.Duration < 0 {
		return nil, errors.New("watch: negative duration")
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Horizon <= 0 {
		o.Horizon = time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return f, nil
}

type event struct {
	egress bool
	key    match.Key
	flow   uint64
	t      time.Time
}

// Run watches until Duration has passed or ctx is done, printing one line
// per Interval (that interval's counts and percentiles), and returns the
// summary over the whole watch (the caller prints it). Cancelling ctx is a
// normal end (Ctrl-C), not an error.
func Run(ctx context.Context, o Options) (*Summary, error) {
	filter, err := o.setDefaults()
	if err != nil {
		return nil, err
	}
	in, err := capture.Open(capture.Options{Interface: o.IngressIf, Namespace: o.IngressNamespace,
		Direction: capture.In, Filter: filter, SnapLen: 192, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("watch: ingress: %w", err)
	}
	defer in.Close()
	out, err := capture.Open(capture.Options{Interface: o.EgressIf, Namespace: o.EgressNamespace,
		Direction: capture.Out, Filter: filter, SnapLen: 192, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("watch: egress: %w", err)
	}
	defer out.Close()

	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	events := make(chan event, 1<<16)
	cctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, h := range []*capture.Handle{in, out} {
		egress := i == 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.Run(cctx, func(p *capture.Packet) {
				u, err := match.ParseUDP(p.Data)
				if err != nil {
					return
				}
				events <- event{egress: egress, key: match.Key{ID: match.PayloadHash(u)}, flow: match.FlowHash(u), t: p.Time}
			})
		}()
	}
	go func() { wg.Wait(); close(events) }()

	if o.OnReady != nil {
		o.OnReady()
	}
	w := newWatcher(o)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	done := ctx.Done()
	for events != nil {
		select {
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			w.add(e)
		case <-tick.C:
			w.m.Expire(w.last, o.Horizon)
			w.line(time.Now(), in, out)
		case <-done:
			done = nil
			// Let the rings' last blocks retire, then stop the captures; the
			// events channel closes when both have returned.
			time.AfterFunc(2*capture.DefaultBlockTimeout+10*time.Millisecond, stop)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	s := w.summary(in, out)
	var noTraffic []error
	if s.IngressPackets == 0 {
		noTraffic = append(noTraffic, fmt.Errorf("watch: ingress interface %q: %w (%s) in %s", o.IngressIf, ErrNoTraffic, o.Filter, o.Duration))
	}
	if s.EgressPackets == 0 {
		noTraffic = append(noTraffic, fmt.Errorf("watch: egress interface %q: %w (%s) in %s", o.EgressIf, ErrNoTraffic, o.Filter, o.Duration))
	}
	if len(noTraffic) > 0 && o.Duration > 0 {
		return s, errors.Join(noTraffic...)
	}
	return s, nil
}

type watcher struct {
	o             Options
	m             *match.Matcher
	win, all      *hdrhistogram.Histogram
	nIn, nOut     uint64
	last          time.Time
	prev          match.Counts
	prevIn, prevE uint64
}

func newWatcher(o Options) *watcher {
	w := &watcher{o: o,
		win: hdrhistogram.New(1, int64(time.Minute), 3),
		all: hdrhistogram.New(1, int64(time.Minute), 3),
	}
	w.m = match.NewMatcher(func(s match.Sample) {
		d := max(1, int64(s.Delay()))
		_ = w.win.RecordValue(d)
		_ = w.all.RecordValue(d)
	})
	return w
}

func (w *watcher) add(e event) {
	if e.t.After(w.last) {
		w.last = e.t
	}
	if e.egress {
		w.nOut++
		w.m.Egress(e.key, e.t)
		return
	}
	w.nIn++
	w.m.Ingress(e.key, e.flow, w.m.NextSeq(e.flow), e.t)
}

func (w *watcher) line(now time.Time, in, out *capture.Handle) {
	c := w.m.Counts()
	ist, _ := in.Stats()
	est, _ := out.Stats()
	h := w.win
	fmt.Fprintf(w.o.Out, "%s in %d out %d matched %d lost %d dup %d reord %d egress-only %d",
		now.Format("15:04:05.000"), w.nIn-w.prevIn, w.nOut-w.prevE, c.Matched-w.prev.Matched, c.Lost-w.prev.Lost,
		c.Duplicated-w.prev.Duplicated, c.Reordered-w.prev.Reordered, c.EgressOnly-w.prev.EgressOnly)
	if h.TotalCount() > 0 {
		fmt.Fprintf(w.o.Out, "  p50 %s p99 %s max %s", us(time.Duration(h.ValueAtQuantile(50))),
			us(time.Duration(h.ValueAtQuantile(99))), us(time.Duration(h.Max())))
	}
	if ist.Drops+est.Drops > 0 {
		fmt.Fprintf(w.o.Out, "  RINGDROPS %d/%d", ist.Drops, est.Drops)
	}
	fmt.Fprintln(w.o.Out)
	h.Reset()
	w.prev, w.prevIn, w.prevE = c, w.nIn, w.nOut
}

func (w *watcher) summary(in, out *capture.Handle) *Summary {
	w.m.Expire(w.last, w.o.Horizon)
	c := w.m.Counts()
	ist, _ := in.Stats()
	est, _ := out.Stats()
	s := &Summary{Counts: c, IngressPackets: w.nIn, EgressPackets: w.nOut,
		Unsettled:        uint64(w.m.Pending() + w.m.PendingEgress()),
		IngressRingDrops: ist.Drops, EgressRingDrops: est.Drops}
	if w.all.TotalCount() > 0 {
		s.P50 = time.Duration(w.all.ValueAtQuantile(50))
		s.P99 = time.Duration(w.all.ValueAtQuantile(99))
		s.P999 = time.Duration(w.all.ValueAtQuantile(99.9))
		s.Min = time.Duration(w.all.Min())
		s.Max = time.Duration(w.all.Max())
	}
	return s
}

func us(d time.Duration) string { return fmt.Sprintf("%.1fus", float64(d)/1e3) }
