package mqttquic

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestQueueAcctMatchesMap drives a queueAcct (an array for the first few
// messages, a map beyond) and a plain map with the same random adds,
// re-adds, removes and resets, and compares the counts and every change
// they return.
func TestQueueAcctMatchesMap(t *testing.T) {
	for _, ids := range []int{2, queueSmall, 3 * queueSmall, 200} {
		rng := rand.New(rand.NewPCG(uint64(ids), 7))
		var q queueAcct
		want := map[uint16]int64{}
		sum := func() (s int64) {
			for _, n := range want {
				s += n
			}
			return s
		}
		for step := range 20000 {
			id := uint16(rng.IntN(ids)) // 0 too, which MQTT never uses
			switch op := rng.IntN(10); {
			case op < 5:
				n := int64(rng.IntN(300)) // 0 too: a message of no bytes is still held
				if rng.IntN(50) == 0 {
					n = math.MaxInt32 + int64(rng.IntN(3)) // at and beyond what an entry holds
				}
				d := q.add(id, n)
				if wd := n - want[id]; d != wd {
					t.Fatalf("ids %d step %d: add(%d, %d) = %d, want %d", ids, step, id, n, d, wd)
				}
				want[id] = n
			case op < 9:
				d := q.remove(id)
				if wd := -want[id]; d != wd {
					t.Fatalf("ids %d step %d: remove(%d) = %d, want %d", ids, step, id, d, wd)
				}
				delete(want, id)
			default:
				var held []packets.Packet
				clear(want)
				for range rng.IntN(2 * ids) {
					pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, PacketID: uint16(rng.IntN(ids)), Payload: make([]byte, rng.IntN(50))}
					if rng.IntN(5) == 0 {
						pk.FixedHeader.Type = packets.Pubrel // not a message: not counted
					} else {
						want[pk.PacketID] = msgSize(pk) // the last of an id counts
					}
					held = append(held, pk)
				}
				before := q.bytes.Load()
				if d := q.reset(held); d != sum()-before {
					t.Fatalf("ids %d step %d: reset = %d, want %d", ids, step, d, sum()-before)
				}
			}
			if got := q.bytes.Load(); got != sum() {
				t.Fatalf("ids %d step %d: %d bytes counted, want %d", ids, step, got, sum())
			}
		}
	}
}

// TestQueueAcctNoMapForFew: a session holding up to queueSmall messages
// allocates nothing to count them.
func TestQueueAcctNoMapForFew(t *testing.T) {
	var left int64
	allocs := testing.AllocsPerRun(100, func() {
		q := new(queueAcct)
		for id := range uint16(queueSmall) {
			q.add(id+1, 100)
		}
		for id := range uint16(queueSmall) {
			q.remove(id + 1)
		}
		left += q.bytes.Load()
	})
	if allocs > 1 || left != 0 { // the queueAcct itself
		t.Fatalf("%.0f allocations a run, %d bytes left; want at most 1 (the queueAcct), 0", allocs, left)
	}
}
