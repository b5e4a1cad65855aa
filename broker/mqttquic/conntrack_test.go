package mqttquic

import (
	"net"
	"testing"
	"time"
	"unsafe"
)

// TestConnTrackEnded checks the channel a takeover waits on for the end
// of a connection (connTrack.ended), made only when one waits: asked for
// before the end it is open and closed by end, asked for twice it is the
// same, asked for after the end it is closed. It also bounds the
// connTrack: with its channel made with every connection the two took
// 64 + 96 bytes; now 64 (docs/BENCH.md, "Heap per idle client, site by
// site").
func TestConnTrackEnded(t *testing.T) {
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	tests := []struct {
		name         string
		waitersFirst int // ended calls before end
	}{
		{"no waiter", 0},
		{"one waiter", 1},
		{"two waiters", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr connTrack
			var chans []<-chan struct{}
			for range tt.waitersFirst {
				chans = append(chans, tr.ended())
			}
			for i, c := range chans {
				if closed(c) {
					t.Fatalf("waiter %d: closed before end", i)
				}
				if c != chans[0] {
					t.Fatalf("waiter %d: another channel than the first's", i)
				}
			}
			tr.end()
			tr.end() // idempotent
			for i, c := range chans {
				if !closed(c) {
					t.Errorf("waiter %d: open after end", i)
				}
			}
			if !closed(tr.ended()) {
				t.Error("ended after end: open")
			}
		})
	}
	if size := unsafe.Sizeof(connTrack{}); size > 64 {
		t.Errorf("connTrack is %d bytes, want at most 64", size)
	}
}

// TestConnTrackDropsPending: a connection's tracking gives back its place
// among those without CONNECT once (at CONNECT or at its end, whichever
// comes first) and keeps nothing of it afterwards (it kept the pending
// struct, 64 bytes, for the connection's life).
func TestConnTrackDropsPending(t *testing.T) {
	p := newPreConnect(Limits{ConnectTimeout: time.Minute, MaxPreConnectPerAddr: 4})
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	w, err := p.admit(a)
	if err != nil {
		t.Fatal(err)
	}
	tr := &connTrack{conn: a}
	tr.pre.Store(w)
	if got := p.held(); got != 1 {
		t.Fatalf("held %d before release, want 1", got)
	}
	tr.releasePre()
	tr.releasePre()
	if got := p.held(); got != 0 {
		t.Errorf("held %d after release, want 0", got)
	}
	if tr.pre.Load() != nil {
		t.Error("the released place is still kept")
	}
	if w.timer.Load() != nil {
		t.Error("the deadline was not stopped")
	}
}
