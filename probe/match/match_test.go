package match

import (
	"testing"
	"time"
)

type ev struct {
	egress bool
	flow   uint64
	seq    uint64
	us     int // timestamp in µs
}

func TestMatcher(t *testing.T) {
	in := func(flow, seq uint64, us int) ev { return ev{false, flow, seq, us} }
	out := func(flow, seq uint64, us int) ev { return ev{true, flow, seq, us} }
	tests := []struct {
		name   string
		events []ev
		want   Counts
		delays []int // µs, in match order
	}{
		{"in order", []ev{in(0, 0, 0), in(0, 1, 10), out(0, 0, 5), out(0, 1, 17)},
			Counts{Ingress: 2, Egress: 2, Matched: 2}, []int{5, 7}},
		{"lost", []ev{in(0, 0, 0), in(0, 1, 10), out(0, 1, 12)},
			Counts{Ingress: 2, Egress: 1, Matched: 1, Lost: 1}, []int{2}},
		{"flooded copies", []ev{in(0, 0, 0), out(0, 0, 4), out(0, 0, 6), out(0, 0, 9)},
			Counts{Ingress: 1, Egress: 3, Matched: 1, Duplicated: 2}, []int{4}},
		{"reordered", []ev{in(0, 0, 0), in(0, 1, 1), in(0, 2, 2), out(0, 1, 5), out(0, 0, 6), out(0, 2, 7)},
			Counts{Ingress: 3, Egress: 3, Matched: 3, Reordered: 1}, []int{4, 6, 5}},
		{"flows independent", []ev{in(0, 0, 0), in(1, 1, 1), out(1, 1, 3), out(0, 0, 4)},
			Counts{Ingress: 2, Egress: 2, Matched: 2}, []int{2, 4}},
		{"egress first", []ev{out(0, 0, 5), in(0, 0, 1)},
			Counts{Ingress: 1, Egress: 1, Matched: 1}, []int{4}},
		{"egress only", []ev{out(0, 7, 5)},
			Counts{Egress: 1, EgressOnly: 1}, nil},
		{"ingress duplicate", []ev{in(0, 0, 0), in(0, 0, 1), out(0, 0, 3)},
			Counts{Ingress: 1, IngressDuplicated: 1, Egress: 1, Matched: 1}, []int{3}},
		{"negative", []ev{in(0, 0, 10), out(0, 0, 8)},
			Counts{Ingress: 1, Egress: 1, Matched: 1, NegativeDelays: 1}, []int{-2}},
		{"early copy", []ev{out(0, 0, 5), out(0, 0, 6), in(0, 0, 1)},
			Counts{Ingress: 1, Egress: 2, Matched: 1, Duplicated: 1}, []int{4}},
	}
	base := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var delays []int
			m := NewMatcher(func(s Sample) { delays = append(delays, int(s.Delay()/time.Microsecond)) })
			for _, e := range tt.events {
				ts := base.Add(time.Duration(e.us) * time.Microsecond)
				k := Key{Flow: e.flow, ID: e.seq}
				if e.egress {
					m.Egress(k, ts)
				} else {
					m.Ingress(k, e.flow, e.seq, ts)
				}
			}
			if got := m.Finish(); got != tt.want {
				t.Errorf("counts\n got %+v\nwant %+v", got, tt.want)
			}
			if len(delays) != len(tt.delays) {
				t.Fatalf("delays %v, want %v", delays, tt.delays)
			}
			for i := range delays {
				if delays[i] != tt.delays[i] {
					t.Errorf("delays %v, want %v", delays, tt.delays)
					break
				}
			}
		})
	}
}

func TestMatcherExpire(t *testing.T) {
	base := time.Unix(1000, 0)
	m := NewMatcher(nil)
	m.Ingress(Key{ID: 1}, 0, 0, base)
	m.Egress(Key{ID: 2}, base)
	m.Ingress(Key{ID: 3}, 0, 1, base.Add(900*time.Millisecond))
	m.Expire(base.Add(time.Second), 500*time.Millisecond)
	c := m.Counts()
	if c.Lost != 1 || c.EgressOnly != 1 || m.Pending() != 1 {
		t.Errorf("after expire: %+v pending %d", c, m.Pending())
	}
}

func TestPassiveSeq(t *testing.T) {
	m := NewMatcher(nil)
	for want := uint64(0); want < 3; want++ {
		if got := m.NextSeq(5); got != want {
			t.Errorf("NextSeq = %d, want %d", got, want)
		}
	}
	if got := m.NextSeq(6); got != 0 {
		t.Errorf("new flow NextSeq = %d", got)
	}
}
