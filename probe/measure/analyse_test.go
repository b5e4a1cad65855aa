package measure

import (
	"testing"
	"time"
)

func TestAnalyse(t *testing.T) {
	// seq 0,1 warmup; flows 2; seq 3 lost; seq 4 duplicated; 5 and 6 reordered.
	ins := []rec{{0, 100, 0}, {1, 200, 1}, {2, 300, 0}, {3, 400, 1}, {4, 500, 0}, {5, 600, 1}, {6, 700, 0}, {7, 800, 1}}
	outs := []rec{{0, 110, 0}, {1, 230, 1}, {2, 305, 0}, {4, 520, 0}, {4, 525, 0}, {7, 810, 1}, {5, 820, 1}, {6, 830, 0}}
	r := analyse(ins, outs, 2, 8, 2)
	if r.Matched != 5 || r.Lost != 1 || r.Duplicated != 1 || r.Reordered != 1 || r.IngressSeen != 6 {
		t.Errorf("counts %+v", r)
	}
	want := []time.Duration{5, 20, 220, 130, 10}
	for i, d := range r.Delays {
		if d != want[i] {
			t.Errorf("delays %v, want %v", r.Delays, want)
			break
		}
	}
	if r.Seqs[0] != 2 || r.Seqs[4] != 7 {
		t.Errorf("seqs %v", r.Seqs)
	}
	if !r.FirstOK || r.FirstDelay != 10 || r.FlowFirstDelays[1] != 30 {
		t.Errorf("first %v %v %v", r.FirstOK, r.FirstDelay, r.FlowFirstDelays)
	}
	r = analyse(ins[1:], outs[1:], 0, 8, 2)
	if r.FirstOK || r.FlowFirstDelays[0] != -1 {
		t.Errorf("first packet not seen but FirstOK %v %v", r.FirstOK, r.FlowFirstDelays)
	}
}

func BenchmarkAnalyse(b *testing.B) {
	const n = 1_000_000
	ins := make([]rec, n)
	outs := make([]rec, n)
	for i := range ins {
		ins[i] = rec{seq: uint64(i), t: int64(i) * 1000, flow: uint32(i % 100)}
		outs[i] = rec{seq: uint64(i), t: int64(i)*1000 + 50, flow: uint32(i % 100)}
	}
	for b.Loop() {
		analyse(ins, outs, 0, n, 100)
	}
}
