package broker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/internal/wire"
)

// runGTLS runs ngtcp2's gtlsclient for one request and returns its download
// directory and combined output.
func runGTLS(t *testing.T, port string, args ...string) (string, string) {
	t.Helper()
	bin := testenv.RequireTool(t, "gtlsclient") // Debian package ngtcp2-client
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	full := append([]string{"--exit-on-all-streams-close", "--no-quic-dump", "--timeout=10s", "--download", dir}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gtlsclient %s: %v\n%s", strings.Join(full, " "), err, tail(string(out)))
	}
	return dir, string(out)
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// TestInteropGTLSClient: a foreign HTTP/3 stack (ngtcp2 + GnuTLS) publishes
// to the broker and subscribes from it.
func TestInteropGTLSClient(t *testing.T) {
	testenv.RequireTool(t, "gtlsclient")
	b := brokertest.Start(t, nil, nil)
	_, port, _ := strings.Cut(b.Addr().String(), ":")
	base := "https://127.0.0.1:" + port

	// Publish: POST with the payload from a file.
	payload := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(payload, []byte("from ngtcp2"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out := runGTLS(t, port, "-m", "POST", "-d", payload, "127.0.0.1", port, base+"/v1/topics/interop/ngtcp2?retain=1")
	if !strings.Contains(out, ":status: 204") && !strings.Contains(out, "status: 204") {
		t.Fatalf("no 204 in gtlsclient output:\n%s", tail(out))
	}
	c := newClient(t, b, nil)
	s := c.mustSubscribe("interop/#", "", false)
	if f := s.mustNext(); string(f.Payload) != "from ngtcp2" || !f.Retained() {
		t.Fatalf("got %+v", f)
	}

	// Subscribe: GET with a wildcard filter, binary frames, ending after one message.
	dir, out := runGTLS(t, port, "127.0.0.1", port, base+"/v1/topics/interop/%23?count=1")
	files, _ := os.ReadDir(dir)
	if len(files) != 1 {
		t.Fatalf("downloaded %d files:\n%s", len(files), tail(out))
	}
	f, err := os.Open(filepath.Join(dir, files[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr, err := wire.NewDecoder(f, 0).Frame()
	if err != nil || fr.Topic != "interop/ngtcp2" || string(fr.Payload) != "from ngtcp2" {
		t.Fatalf("subscription by gtlsclient got %+v, %v", fr, err)
	}
}
