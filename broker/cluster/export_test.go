package cluster

import "strings"

// SetPutFault makes l's bucket puts fail while f returns an error for
// their key (as a put does that gets no acknowledgement in time).
func SetPutFault(l *Link, f func(key string) error) {
	g := func(op, key string) error {
		if op != "put" {
			return nil
		}
		return f(key)
	}
	l.fault.Store(&g)
}

// SetGapFault makes l's gap announcements fail while f returns an error
// for the topics they name (joined by ",").
func SetGapFault(l *Link, f func(topics string) error) {
	g := func(op, key string) error {
		if op != "gap" {
			return nil
		}
		return f(key)
	}
	l.fault.Store(&g)
}

// SetRemoteGapHook calls f when a gap note of another broker reaches l
// (op "remote-gap-enter"), is taken ("remote-gap", after it is marked
// seen, before the subscribers are told) or is ignored by a path
// ("remote-gap-ignored"); via is the path: "core", "stream" or
// "catch-up". f may hold the caller.
func SetRemoteGapHook(l *Link, f func(op, via string)) {
	g := func(op, key string) error {
		if strings.HasPrefix(op, "remote-gap") {
			f(op, key)
		}
		return nil
	}
	l.fault.Store(&g)
}
