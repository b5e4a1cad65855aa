package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgressPlainLinesOffTerminal: progress written to a file or a pipe
// (a CI log, `make demo > out`) is one plain line per run, never the
// carriage-return frames of a redrawn bar.
func TestProgressPlainLinesOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, 3)
	ids := []string{"h3-lan-16", "mqtt-lan-16", "h3-nbiot-16"}
	for i, id := range ids {
		p.start(i, id)
		p.done(i, id, i != 1, 1500*time.Millisecond)
	}
	p.stop()
	out := buf.String()
	if strings.ContainsRune(out, '\r') {
		t.Fatalf("progress off a terminal has carriage returns: %q", out)
	}
	want := "bench [1/3] h3-lan-16 ok (1.5 s)\n" +
		"bench [2/3] mqtt-lan-16 FAILED (1.5 s)\n" +
		"bench [3/3] h3-nbiot-16 ok (1.5 s)\n"
	if out != want {
		t.Fatalf("progress lines:\n%s\nwant:\n%s", out, want)
	}
}

func TestProgressNilWriter(t *testing.T) {
	p := newProgress(nil, 2)
	p.start(0, "x")
	p.done(0, "x", true, time.Second)
	p.stop()
}
