package bridge_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/internal/testutil"
)

// TestSessionResumedAcrossRestart: a bridge with a store keeps its TLS
// session and the last connection's RTT in the store directory, so after
// a restart of the broker (a new Bridge on the same store) its first dial
// resumes the session (no certificate chain down a slow link) and holds
// its handshake probes for that RTT.
func TestSessionResumedAcrossRestart(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := brokertest.Start(t, pki, nil)
	ms := mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker})
	addr := ms.QUICAddr().(*net.UDPAddr)
	dir := t.TempDir()
	caFile := pki.CAFile(t)
	store := filepath.Join(dir, "store")
	cfg := config(t, fmt.Sprintf(`
[[bridge]]
name          = "peer"
url           = "mqtt-quic://localhost:%d"
ca_file       = %q
out           = ["sensors/#"]
store_dir     = %q
reconnect_min = "50ms"
reconnect_max = "200ms"
`, addr.Port, caFile, store))
	connected := func(br *bridge.Bridge, what string) {
		t.Helper()
		if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
			t.Fatalf("%s: bridge never connected: %+v", what, br.Stats())
		}
	}
	first, err := bridge.New(edge.Broker, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	connected(first, "first run")
	if n := bridge.Resumed(first); n != 0 {
		t.Fatalf("first dial resumed a session (%d): there was none", n)
	}
	// The upstream's session ticket comes after the handshake.
	waitFile(ctx, t, filepath.Join(store, "tls-session.json"), `"sessions":{"`)
	// The connection's RTT is noted once its handshake is done, before
	// any close (a broker killed with SIGKILL does not close it).
	waitFile(ctx, t, filepath.Join(store, "tls-session.json"), fmt.Sprintf(`"rtt_ms":{"localhost:%d":`, addr.Port))
	closeCtx, closeCancel := context.WithTimeout(ctx, 5*time.Second)
	defer closeCancel()
	if err := first.Close(closeCtx); err != nil {
		t.Fatal(err)
	}

	second := startBridge(t, edge.Broker, cfg)
	connected(second, "after the restart")
	if n := bridge.Resumed(second); n != 1 {
		t.Fatalf("first dial after the restart: %d resumed, want 1", n)
	}
}

// waitFile waits until file holds want.
func waitFile(ctx context.Context, t *testing.T, file, want string) {
	t.Helper()
	for {
		b, _ := os.ReadFile(file)
		if strings.Contains(string(b), want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never held %s: %s", file, want, b)
		case <-time.After(20 * time.Millisecond): // polling a file, not timing
		}
	}
}
