package mqtt

import (
	"runtime"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"
	"github.com/stretchr/testify/require"
)

// liveHeap is the heap in use after two collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// quiot: an idle client holds no write queue. Upstream made each client's
// outbound channel whole (8 bytes a slot, 8 KiB with 1024 slots) for the
// life of the client; the writeQueue's array grows while packets are
// queued and is dropped when the queue empties (QUIOT.md).
func TestIdleClientWriteQueueHeap(t *testing.T) {
	const n = 200
	o := &ops{
		info:  new(system.Info),
		hooks: new(Hooks),
		log:   logger,
		options: &Options{Capabilities: &Capabilities{
			MaximumClientWritesPending: 1024,
			maximumPacketID:            10,
		}},
	}
	pk := new(packets.Packet)
	clients := make([]*Client, 0, n)
	before := liveHeap()
	for i := 0; i < n; i++ {
		cl := newClient(nil, o)
		// A burst of 100 packets queued and written: the queue grows, then
		// empties.
		for j := 0; j < 100; j++ {
			require.True(t, cl.State.outbound.push(pk))
		}
		for j := 0; j < 100; j++ {
			_, ok := cl.State.outbound.pop()
			require.True(t, ok)
		}
		_, ok := cl.State.outbound.pop()
		require.False(t, ok)
		clients = append(clients, cl)
	}
	per := (int64(liveHeap()) - int64(before)) / n
	t.Logf("heap per idle client: %d bytes", per)
	require.LessOrEqual(t, per, int64(2048))
	runtime.KeepAlive(clients)
}

// quiot: the write queue keeps its order and its bound (MaximumClientWritesPending+1
// packets) through growth, reuse of taken slots and release.
func TestWriteQueueOrderAndBound(t *testing.T) {
	q := writeQueue{max: 5}
	pks := make([]*packets.Packet, 64)
	for i := range pks {
		pks[i] = &packets.Packet{PacketID: uint16(i)}
	}
	next, want := 0, 0
	for _, step := range []struct{ push, pop int }{{5, 2}, {3, 4}, {5, 5}, {1, 0}, {4, 5}, {2, 2}} {
		for i := 0; i < step.push; i++ {
			ok := q.push(pks[next])
			if q.len() > q.cap() || (!ok && q.len() < q.cap()) {
				t.Fatalf("push %d: ok %v with %d of %d queued", next, ok, q.len(), q.cap())
			}
			if ok {
				next++
			}
		}
		for i := 0; i < step.pop; i++ {
			pk, ok := q.pop()
			require.True(t, ok)
			require.Equal(t, uint16(want), pk.PacketID)
			want++
		}
	}
	_, ok := q.pop()
	require.False(t, ok)
	require.Equal(t, next, want)
	require.Equal(t, 0, q.len())
}
