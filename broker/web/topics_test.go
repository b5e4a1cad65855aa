package web

import (
	"strings"
	"testing"
	"time"
)

func TestTopicTable(t *testing.T) {
	tt := newTopicTable(2)
	now := time.Unix(1000, 0)
	tt.observe("a", []byte("1"), false, "h3", now)
	tt.observe("a", []byte("22"), true, "mqtt", now)
	tt.observe("b", []byte{0xff, 0x00}, false, "h3", now)
	tt.observe("c", []byte("x"), false, "h3", now) // beyond the limit
	tt.observe("b", []byte(strings.Repeat("é", 200)), true, "h3", now)
	tt.observe("b", nil, true, "h3", now) // clears retained
	tt.observe("a", []byte("3"), false, "h3", now)
	got, untracked := tt.snapshot()
	if untracked != 1 || len(got) != 2 {
		t.Fatalf("got %d topics, %d untracked", len(got), untracked)
	}
	a, b := got[0], got[1]
	if a.Topic != "a" || a.Count != 3 || a.Last != "3" || !a.Retained || a.Origin != "h3" {
		t.Errorf("a = %+v", a)
	}
	if b.Topic != "b" || b.Count != 3 || b.Retained || b.Size != 0 {
		t.Errorf("b = %+v", b)
	}
	tt.observe("b", []byte(strings.Repeat("é", 200)), false, "h3", now)
	got, _ = tt.snapshot()
	b = got[1]
	if !b.Truncated || b.Encoding != "" || len(b.Last) > previewBytes || !strings.HasPrefix(b.Last, "éé") || b.Size != 400 {
		t.Errorf("truncated utf-8: %+v", b)
	}
	tt.observe("b", []byte{0xff, 0xfe}, false, "h3", now)
	got, _ = tt.snapshot()
	if got[1].Encoding != "base64" || got[1].Last != "//4=" {
		t.Errorf("binary: %+v", got[1])
	}
}
