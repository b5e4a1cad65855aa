package mqttquic

import (
	"fmt"
	"runtime"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// countSink counts the interest an interestHook adds per filter.
type countSink map[string]int

func (s countSink) AddInterest(f string, delta int)       { s[f] += delta }
func (s countSink) CoverInterest(string) (release func()) { return func() {} }
func (s countSink) Covering() bool                        { return false }

func subscribePacket(filters ...string) packets.Packet {
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}}
	for _, f := range filters {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: f})
	}
	return pk
}

// TestInterestHookHeldFilters: the interest hook counts each filter a
// client holds once, through the change from the few filters it keeps in
// a slice to a map and back down, and forgets a client that holds none.
func TestInterestHookHeldFilters(t *testing.T) {
	sink := countSink{}
	h := &interestHook{sink: sink, held: map[string]filterSet{}, covered: map[*mqtt.Client][]func(){}}
	cl := &mqtt.Client{ID: "c"}
	var all []string
	for i := range 2 * filterSetFew {
		all = append(all, fmt.Sprintf("f/%d", i))
	}
	steps := []struct {
		sub, unsub []string
		want       int // filters held
	}{
		{sub: all[:1], want: 1},
		{sub: all[:3], want: 3},
		{sub: all[:filterSetFew], want: filterSetFew},
		{sub: all, want: 2 * filterSetFew},
		{sub: all[5:9], want: 2 * filterSetFew},
		{unsub: all[:filterSetFew+2], want: filterSetFew - 2},
		{unsub: all[:filterSetFew+2], want: filterSetFew - 2},
		{unsub: all, want: 0},
		{sub: []string{"$share/g/f/1", "f/1"}, want: 1},
		{unsub: []string{"f/1"}, want: 0},
	}
	for i, st := range steps {
		if st.sub != nil {
			codes := make([]byte, len(st.sub))
			h.OnSubscribed(cl, subscribePacket(st.sub...), codes)
		}
		if st.unsub != nil {
			h.OnUnsubscribed(cl, subscribePacket(st.unsub...))
		}
		got := 0
		for f, n := range sink {
			if n < 0 || n > 1 {
				t.Fatalf("step %d: interest in %q is %d", i, f, n)
			}
			got += n
		}
		if got != st.want || h.held[cl.ID].len() != st.want {
			t.Fatalf("step %d: %d filters counted, %d held, want %d", i, got, h.held[cl.ID].len(), st.want)
		}
	}
	if _, ok := h.held[cl.ID]; ok {
		t.Error("a client holding no filter is still in the table")
	}
}

// TestInterestHookHeapPerClient bounds what the interest hook keeps for a
// client subscribed to one filter: a map of one filter cost about 310
// bytes a client, the slice about 140 (docs/BENCH.md, "Heap and stack per
// idle connection").
func TestInterestHookHeapPerClient(t *testing.T) {
	const n = 1000
	h := &interestHook{sink: countSink{}, held: map[string]filterSet{}, covered: map[*mqtt.Client][]func(){}}
	clients := make([]*mqtt.Client, n)
	for i := range clients {
		clients[i] = &mqtt.Client{ID: fmt.Sprintf("c%d", i)}
	}
	pk := subscribePacket("a/b")
	codes := []byte{1}
	before := heapAlloc()
	for _, cl := range clients {
		h.OnSubscribed(cl, pk, codes)
	}
	per := (int64(heapAlloc()) - int64(before)) / n
	t.Logf("interest hook heap per subscribed client: %d bytes", per)
	if limit := int64(200); per > limit {
		t.Errorf("interest hook heap per subscribed client %d bytes, want at most %d", per, limit)
	}
	runtime.KeepAlive(h)
	runtime.KeepAlive(clients)
}
