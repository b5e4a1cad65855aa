package cluster

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
