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

// TestTuningDocWakeupSection: docs/TUNING.md carries the wake-up section
// the generator writes, right before the NAT section.
func TestTuningDocWakeupSection(t *testing.T) {
	b, err := os.ReadFile("../../docs/TUNING.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), wakeupSection+natMigrationSection) {
		t.Fatal("docs/TUNING.md does not end with wakeupSection (device/bench/tuningdoc_wake.go) and natMigrationSection: keep them the same")
	}
}
