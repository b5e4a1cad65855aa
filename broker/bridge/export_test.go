package bridge

// Resumed is the count of the bridge's dials that resumed a TLS session.
func Resumed(br *Bridge) uint64 { return br.resumed.Load() }
