package gen

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// fakeSender records what Run sends.
type fakeSender struct {
	bufs    [][]byte
	batches []int
	hdrs    []Header
	flows   []uint32
	fail    error
}

func (f *fakeSender) payload(i int) []byte { return f.bufs[i] }
func (f *fakeSender) sources() []netip.AddrPort {
	return []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:1")}
}
func (f *fakeSender) close() {}
func (f *fakeSender) send(flows []uint32) (int, error) {
	if f.fail != nil {
		return 0, f.fail
	}
	f.batches = append(f.batches, len(flows))
	for i, fl := range flows {
		h, err := Decode(f.bufs[i])
		if err != nil {
			return i, err
		}
		f.hdrs = append(f.hdrs, h)
		f.flows = append(f.flows, fl)
	}
	return len(flows), nil
}

func withFake(t *testing.T, f *fakeSender) {
	old := openSender
	openSender = func(o Options, plen int) (sender, error) {
		for i := 0; i < maxBatch; i++ {
			f.bufs = append(f.bufs, make([]byte, plen))
		}
		return f, nil
	}
	t.Cleanup(func() { openSender = old })
}

func TestRunBurstsFlowsCount(t *testing.T) {
	f := &fakeSender{}
	withFake(t, f)
	st, err := Run(context.Background(), Options{Dst: netip.MustParseAddrPort("10.0.0.2:9"),
		Rate: 4000, Burst: 4, Flows: 3, Count: 40, Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 40 || st.Seqs != 40 || len(f.hdrs) != 40 {
		t.Fatalf("sent %d seqs %d recorded %d", st.Sent, st.Seqs, len(f.hdrs))
	}
	for _, b := range f.batches {
		if b%4 != 0 {
			t.Errorf("batch of %d packets, want whole bursts of 4: %v", b, f.batches)
			break
		}
	}
	for i, h := range f.hdrs {
		if h.Seq != uint64(i) || h.Flow != uint32(i%3) || f.flows[i] != h.Flow || h.Sent.IsZero() {
			t.Fatalf("packet %d: %+v on flow %d", i, h, f.flows[i])
		}
	}
	// 10 bursts 1 ms apart: about 9 ms from first to last (packets never
	// leave early; a late first burst shortens the span a little).
	if span := f.hdrs[39].Sent.Sub(f.hdrs[0].Sent); span < 5*time.Millisecond {
		t.Errorf("40 packets at 4000/s in bursts of 4 took %v", span)
	}
}

// TestRunWarmup: the warmup's packets are the sequence numbers scheduled
// before Warmup has passed (20 at 1000/s over 20 ms), counted apart. With
// Count the stream is sent whole, so the figures are exact whatever the
// load; with Duration only the bounds hold (a sender descheduled near the
// end stops on time and sends fewer, never more than scheduled).
func TestRunWarmup(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		f := &fakeSender{}
		withFake(t, f)
		st, err := Run(context.Background(), Options{Dst: netip.MustParseAddrPort("10.0.0.2:9"),
			Rate: 1000, Warmup: 20 * time.Millisecond, Count: 50, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if st.WarmupSent != 20 || st.Seqs != 50 {
			t.Errorf("warmup %d of %d sequence numbers, want 20 of 50", st.WarmupSent, st.Seqs)
		}
	})
	t.Run("duration", func(t *testing.T) {
		f := &fakeSender{}
		withFake(t, f)
		st, err := Run(context.Background(), Options{Dst: netip.MustParseAddrPort("10.0.0.2:9"),
			Rate: 1000, Warmup: 20 * time.Millisecond, Duration: 30 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if st.WarmupSent > 20 || st.Seqs > 50 || st.WarmupSent > st.Seqs {
			t.Errorf("warmup %d of %d sequence numbers, want at most 20 of at most 50", st.WarmupSent, st.Seqs)
		}
	})
}

func TestRunSendErrors(t *testing.T) {
	f := &fakeSender{fail: errors.New("refused")}
	withFake(t, f)
	st, err := Run(context.Background(), Options{Dst: netip.MustParseAddrPort("10.0.0.2:9"), Rate: 1000, Count: 5})
	if err == nil || st.Errors != 5 || st.Sent != 0 {
		t.Errorf("err %v, stats %+v", err, st)
	}
}

func TestRunCancelled(t *testing.T) {
	f := &fakeSender{}
	withFake(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(ctx, Options{Dst: netip.MustParseAddrPort("10.0.0.2:9"), Rate: 1, Duration: time.Minute})
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
}
