package cluster

// SetPutFault makes l's bucket puts fail while f returns an error for
// their key (as a put does that gets no acknowledgement in time).
func SetPutFault(l *Link, f func(key string) error) { l.putFault.Store(&f) }
