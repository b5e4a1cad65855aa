package bridge

import "testing"

// TestEchoGuard: each message the bridge sent is taken for an echo once;
// other topics or payloads are not.
func TestEchoGuard(t *testing.T) {
	g := newEchoGuard()
	g.sent("p/a", []byte("1"))
	g.sent("p/a", []byte("1")) // sent again (a cut publish)
	g.sent("p/b", []byte("2"))
	for i, tc := range []struct {
		topic, payload string
		echo           bool
	}{
		{"p/a", "2", false},
		{"p/b", "1", false},
		{"p/a", "1", true},
		{"p/b", "2", true},
		{"p/b", "2", false}, // one copy only
		{"p/a", "1", true},
		{"p/a", "1", false},
		{"p/a1", "", false}, // the separator: "p/a"+"1" is not "p/a1"+""
	} {
		if got := g.echoed(tc.topic, []byte(tc.payload)); got != tc.echo {
			t.Errorf("#%d echoed(%s, %q) = %v, want %v", i, tc.topic, tc.payload, got, tc.echo)
		}
	}
	for range echoMax + 10 {
		g.sent("p/c", nil)
	}
	if len(g.fifo) != echoMax || g.count[g.key("p/c", nil)] != echoMax {
		t.Errorf("%d fingerprints held, want the bound %d", len(g.fifo), echoMax)
	}
}
