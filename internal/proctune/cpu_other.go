//go:build !unix

package proctune

import "time"

// processCPU cannot read the process's CPU time here: Apply then leaves
// GOMAXPROCS at the runtime's default.
func processCPU() (time.Duration, bool) { return 0, false }
