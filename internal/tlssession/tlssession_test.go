package tlssession

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testutil"
)

// TestSessionFileRTTRoundTrip: the RTT recorded for a broker is in the
// file and read back by a new cache (a new process); a file of the
// earlier format (the sessions map alone) still loads, with no RTT.
func TestSessionFileRTTRoundTrip(t *testing.T) {
	file := t.TempDir() + "/session.json"
	c := NewFile(file, testutil.DiscardLogger()).(RTTMemory)
	c.SetLastRTT("broker.example:443", 1512*time.Millisecond)
	c.SetLastRTT("other.example:443", 0) // ignored
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"rtt_ms":{"broker.example:443":1512}`) {
		t.Fatalf("session file %s: no RTT", b)
	}
	again := NewFile(file, testutil.DiscardLogger()).(RTTMemory)
	for _, tc := range []struct {
		broker string
		want   time.Duration
	}{
		{"broker.example:443", 1512 * time.Millisecond},
		{"other.example:443", 0},
	} {
		if got := again.LastRTT(tc.broker); got != tc.want {
			t.Errorf("LastRTT(%s) = %v, want %v", tc.broker, got, tc.want)
		}
	}

	old := t.TempDir() + "/old.json"
	if err := os.WriteFile(old, []byte(`{"broker.example":{"ticket":"","state":""}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	oc := NewFile(old, testutil.DiscardLogger())
	if got := oc.(RTTMemory).LastRTT("broker.example:443"); got != 0 {
		t.Errorf("old-format file: LastRTT = %v", got)
	}
}
