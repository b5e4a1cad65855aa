//go:build race

package mqtt

// raceEnabled: the race detector makes sync.Pool drop a share of what is
// put back, so allocation counts of pooled paths do not hold under it.
const raceEnabled = true
