package mqttquic

import (
	"fmt"
	"runtime"
	"testing"
)

// TestPerClientHeap bounds the Go heap an idle MQTT/TCP client costs
// (broker side plus this test's own raw client: its connection and a 4 KiB
// bufio.Reader, about 5 KiB). mochi allocates each client's outbound queue
// whole, 8 bytes a slot, and its read buffer with the client: with 1024
// slots and 2 KiB this measured 20 KiB, with the defaults (256 slots,
// 1 KiB) 12 KiB (docs/BENCH.md, "quiot beside mosquitto").
func TestPerClientHeap(t *testing.T) {
	const n = 200
	p := newPKI(t)
	s := startServer(t, p, func(o *Options) { o.QUICAddr, o.TLS, o.TCPAddr = "off", nil, "127.0.0.1:0" })
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// One client first, so what is allocated once (the client table, the
	// topic index) is not counted per client.
	mustConnect(t, s, p, "tcp", connectOpts{version: 4, id: "first", clean: true})
	before := heap()
	clients := make([]*rawClient, 0, n)
	for i := range n {
		clients = append(clients, mustConnect(t, s, p, "tcp", connectOpts{version: 4, id: fmt.Sprintf("c%d", i), clean: true}))
	}
	after := heap()
	per := (int64(after) - int64(before)) / n
	t.Logf("heap per idle client: %d bytes (broker and test client)", per)
	if limit := int64(14 << 10); per > limit {
		t.Errorf("heap per idle client %d bytes, want at most %d", per, limit)
	}
	runtime.KeepAlive(clients)
}
