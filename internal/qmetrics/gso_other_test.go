//go:build !linux

package qmetrics

import "testing"

// gsoSupported is false: GSO is Linux-only.
func gsoSupported(*testing.T) bool { return false }
