package ovs

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// ProcSample is one reading of a process's CPU time and memory.
type ProcSample struct {
	At time.Time
	// CPUSeconds is user+system CPU time so far.
	CPUSeconds float64
	// RSSBytes is the resident set size now; PeakRSSBytes is VmHWM.
	RSSBytes, PeakRSSBytes int64
}

// SampleProcess reads pid's CPU time and memory from procfs at procRoot
// ("" = /proc).
func SampleProcess(procRoot string, pid int) (ProcSample, error) {
	if procRoot == "" {
		procRoot = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return ProcSample{}, fmt.Errorf("open procfs: %w", err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return ProcSample{}, fmt.Errorf("process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return ProcSample{}, fmt.Errorf("process %d stat: %w", pid, err)
	}
	s := ProcSample{At: time.Now(), CPUSeconds: st.CPUTime(), RSSBytes: int64(st.ResidentMemory())}
	if status, err := p.NewStatus(); err == nil {
		s.PeakRSSBytes = int64(status.VmHWM)
	}
	return s, nil
}

// CPUPercent is the CPU used between two samples as a percentage of one core.
func CPUPercent(before, after ProcSample) float64 {
	wall := after.At.Sub(before.At).Seconds()
	if wall <= 0 {
		return 0
	}
	return 100 * (after.CPUSeconds - before.CPUSeconds) / wall
}

// HostMemAvailable returns MemAvailable from procRoot/meminfo ("" = /proc).
func HostMemAvailable(procRoot string) (int64, error) {
	if procRoot == "" {
		procRoot = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return 0, fmt.Errorf("open procfs: %w", err)
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, fmt.Errorf("read meminfo: %w", err)
	}
	if mi.MemAvailableBytes != nil {
		return int64(*mi.MemAvailableBytes), nil
	}
	if mi.MemAvailable != nil {
		return int64(*mi.MemAvailable) * 1024, nil
	}
	return 0, fmt.Errorf("meminfo has no MemAvailable")
}

// HostLoad1 returns the 1-minute load average from procRoot/loadavg
// ("" = /proc): a busy host delays the switch's threads, so it is recorded
// with every condition.
func HostLoad1(procRoot string) (float64, error) {
	if procRoot == "" {
		procRoot = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return 0, fmt.Errorf("open procfs: %w", err)
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return 0, fmt.Errorf("read loadavg: %w", err)
	}
	return l.Load1, nil
}
