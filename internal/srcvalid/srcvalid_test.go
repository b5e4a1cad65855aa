package srcvalid

import (
	"context"
	"testing"

	"github.com/quic-go/quic-go"
)

// TestThreshold: a Retry once threshold unvalidated handshakes are
// half-open, for every attempt with a negative threshold; validated
// addresses and ended handshakes do not count.
func TestThreshold(t *testing.T) {
	if New(0).threshold != DefaultThreshold {
		t.Fatal("zero is not the default")
	}
	if !New(-1).VerifySourceAddress(nil) {
		t.Error("negative threshold: no Retry")
	}
	v := New(2)
	c1 := v.Begin(context.Background(), &quic.ClientInfo{})
	v.Begin(context.Background(), &quic.ClientInfo{AddrVerified: true})
	if v.VerifySourceAddress(nil) || v.HalfOpen() != 1 {
		t.Fatalf("one half-open: Retry asked, or half-open %d", v.HalfOpen())
	}
	v.Begin(context.Background(), &quic.ClientInfo{})
	if !v.VerifySourceAddress(nil) || v.Retries() != 1 {
		t.Fatalf("two half-open: no Retry (retries %d)", v.Retries())
	}
	h := c1.Value(key{}).(*handshake)
	h.done() // its handshake completed (Established)
	h.done() // once only
	if v.HalfOpen() != 1 || v.VerifySourceAddress(nil) {
		t.Errorf("a handshake completed: half-open %d", v.HalfOpen())
	}
}
