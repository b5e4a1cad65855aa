//go:build unix

package proctune

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used.
// It is one getrusage(2), not internal/sysstat's procfs read: the
// controller samples every second for the broker's life, and a system call
// costs less than opening and parsing /proc/self/stat.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
