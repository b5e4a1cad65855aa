package bench

import (
	"os"
	"strings"
	"testing"
)

// TestTuningDocNATSection: docs/TUNING.md carries the NAT section the
// generator writes, so a regenerated TUNING.md keeps it and an edit of one
// shows up against the other.
func TestTuningDocNATSection(t *testing.T) {
	b, err := os.ReadFile("../../docs/TUNING.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), natMigrationSection) {
		t.Fatal("docs/TUNING.md does not end with natMigrationSection (device/bench/tuningdoc_nat.go): keep the two the same")
	}
}
