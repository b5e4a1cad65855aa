package web

import (
	"sync"
	"time"
)

// endedTokens are the session tokens ended by a log-out (DELETE
// /v1/session) before their expiry. Tokens are stateless (signed), so the
// handler remembers the ended ones until they expire, at most maxEnded of
// them; beyond that, a log-out ends every token of its identity issued
// until then (the identity's other browsers log in again).
type endedTokens struct {
	ttl time.Duration // the tokens' lifetime (Options.SessionTTL)
	max int

	mu sync.Mutex
	// byMAC maps an ended token's MAC to its expiry.
	byMAC map[string]time.Time
	// before maps an identity to the time before which its tokens were
	// issued are ended.
	before map[string]time.Time
}

// maxEnded bounds the tokens remembered one by one (~100 bytes each).
const maxEnded = 10000

func newEndedTokens(ttl time.Duration) *endedTokens {
	return &endedTokens{ttl: ttl, max: maxEnded, byMAC: map[string]time.Time{}, before: map[string]time.Time{}}
}

// end ends t at now.
func (e *endedTokens) end(t Token, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.byMAC) >= e.max {
		e.pruneLocked(now)
	}
	if len(e.byMAC) < e.max {
		e.byMAC[string(t.mac)] = t.Expires
		return
	}
	e.before[t.Identity] = now
}

// pruneLocked forgets what has expired by now. e.mu held.
func (e *endedTokens) pruneLocked(now time.Time) {
	for k, exp := range e.byMAC {
		if !now.Before(exp) {
			delete(e.byMAC, k)
		}
	}
	for id, at := range e.before {
		if !now.Before(at.Add(e.ttl + time.Second)) {
			delete(e.before, id)
		}
	}
}

// ended reports whether t was ended by a log-out.
func (e *endedTokens) ended(t Token) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.byMAC[string(t.mac)]; ok {
		return true
	}
	at, ok := e.before[t.Identity]
	// Expiry has a resolution of a second: a token issued in the second
	// of the log-out counts as issued before it.
	return ok && !t.Expires.Add(-e.ttl).After(at)
}
