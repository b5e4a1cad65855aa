//go:build !linux

package qmetrics

// gsoSegmentSize returns 0: GSO is Linux-only.
func gsoSegmentSize([]byte) int { return 0 }
