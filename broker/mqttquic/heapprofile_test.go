package mqttquic

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestIdleHeapProfile writes a heap profile (every allocation sampled) of
// QUIOT_HEAPPROFILE_N (2000) bridged MQTT/TCP clients, each connected with
// a clean start and subscribed at QoS 1 to one of 10 topics, as the issue 23
// harness's clients are, to the file QUIOT_HEAPPROFILE names. Read it with
// `go tool pprof -sample_index=inuse_space`; the test's own raw clients
// are in it too (mustConnect, rawClient). Not part of make test.
func TestIdleHeapProfile(t *testing.T) {
	out := os.Getenv("QUIOT_HEAPPROFILE")
	if out == "" {
		t.Skip("heap profile of idle clients: set QUIOT_HEAPPROFILE=file")
	}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("QUIOT_HEAPPROFILE_N")); err == nil && v > 0 {
		n = v
	}
	runtime.MemProfileRate = 1
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool()})
	b := &bridged{pki: p, h3: h3, mqtt: startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.QUICAddr, o.TLS, o.TCPAddr = "off", nil, "127.0.0.1:0"
		o.Limits.MaxSessionsPerIdentity = 2 * n
		o.Limits.MaxClients = 2 * n
		o.Limits.MaxSessions = 2 * n
	})}
	clients := make([]*rawClient, 0, n)
	for i := range n {
		c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{version: 4, id: fmt.Sprintf("s%d", i), clean: true})
		if codes := c.subscribe(fmt.Sprintf("hp/t%d", i%10)); len(codes) != 1 || codes[0] != 1 {
			t.Fatalf("subscribe: codes %v", codes)
		}
		clients = append(clients, c)
	}
	before := heapAlloc()
	t.Logf("%d clients: heap %d bytes", n, before)
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(clients)
}
