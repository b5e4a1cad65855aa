package web

import (
	"testing"
	"time"
)

// TestEndedTokens: a log-out ends its token until the token expires;
// beyond maxEnded tokens remembered one by one, a log-out ends every token
// of its identity issued until then, and a token issued later works.
func TestEndedTokens(t *testing.T) {
	ttl := 15 * time.Minute
	s := signer{key: make([]byte, 32)}
	now := time.Unix(1_800_000_000, 0)
	tok := func(id string, at time.Time) Token {
		tk, err := s.verify(s.sign(id, at.Add(ttl), 0), at)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	e := newEndedTokens(ttl)
	e.max = 2
	a1, a2 := tok("alice", now), tok("alice", now.Add(time.Second))
	e.end(a1, now.Add(2*time.Second))
	if !e.ended(a1) || e.ended(a2) {
		t.Fatalf("one token ended: a1 %v a2 %v", e.ended(a1), e.ended(a2))
	}
	e.end(tok("bob", now), now.Add(2*time.Second))
	// Full: carol's log-out ends carol's tokens issued until then.
	c1, c2 := tok("carol", now), tok("carol", now.Add(time.Second))
	e.end(c1, now.Add(3*time.Second))
	if !e.ended(c1) || !e.ended(c2) || e.ended(tok("carol", now.Add(4*time.Second))) || e.ended(a2) {
		t.Fatalf("by identity: c1 %v c2 %v", e.ended(c1), e.ended(c2))
	}
	// Expired entries make room again.
	later := now.Add(ttl + time.Hour)
	d := tok("dave", later)
	e.end(d, later)
	if len(e.byMAC) != 1 || len(e.before) != 0 || !e.ended(d) {
		t.Fatalf("after expiry: %d tokens, %d identities", len(e.byMAC), len(e.before))
	}
}
