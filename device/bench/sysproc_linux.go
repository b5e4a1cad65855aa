package bench

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr puts a role in its own process group (so a terminal's Ctrl-C
// reaches only the bench, which then stops the roles in order) and has the
// kernel kill it if the bench dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// interruptGroup sends SIGINT to the role's process group.
func interruptGroup(c *exec.Cmd) {
	if c.Process != nil {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGINT)
	}
}

// killGroup sends SIGKILL to the role's process group; leftoversOnly is
// a hint that the leader already exited (the group may still have members).
func killGroup(c *exec.Cmd, leftoversOnly bool) {
	if c.Process != nil {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	_ = leftoversOnly
}

// usage returns the user+system CPU time and peak RSS (KiB) of an exited
// role from wait4's rusage: the same figures as /proc/PID/stat and VmHWM,
// at microsecond instead of clock-tick (10 ms) resolution.
func usage(ps *os.ProcessState) (cpu time.Duration, maxRSSKiB int64, ok bool) {
	if ps == nil {
		return 0, 0, false
	}
	ru, isRU := ps.SysUsage().(*syscall.Rusage)
	if !isRU || ru == nil {
		return 0, 0, false
	}
	return ps.UserTime() + ps.SystemTime(), int64(ru.Maxrss), true
}
