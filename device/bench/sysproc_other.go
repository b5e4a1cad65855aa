//go:build !linux

package bench

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr is nil off Linux: no process groups or death signal.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// interruptGroup interrupts the role process.
func interruptGroup(c *exec.Cmd) {
	if c.Process != nil {
		_ = c.Process.Signal(os.Interrupt)
	}
}

// killGroup kills the role process.
func killGroup(c *exec.Cmd, leftoversOnly bool) {
	if c.Process != nil && !leftoversOnly {
		_ = c.Process.Kill()
	}
}

// usage is unavailable off Linux.
func usage(ps *os.ProcessState) (cpu time.Duration, maxRSSKiB int64, ok bool) {
	return 0, 0, false
}
