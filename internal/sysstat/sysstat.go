// Package sysstat measures the CPU time and memory of one process from the
// Linux proc filesystem (via github.com/prometheus/procfs): user and system
// CPU time from /proc/PID/stat, current and peak resident memory (VmRSS,
// VmHWM) from /proc/PID/status.
//
// The proc root is injectable (Options.ProcRoot), so tests read fixtures
// under testdata/. Under qemu-user, /proc/self/stat is faked and most of its
// fields read 0; the readers accept that and report zeros instead of failing.
package sysstat

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"time"

	"github.com/prometheus/procfs"
)

// TickDuration is the length of one clock tick in /proc/PID/stat. The
// kernel exports CPU times in USER_HZ units, which is 100 on every Linux
// architecture (arm, arm64, amd64, 386).
const TickDuration = 10 * time.Millisecond

// ErrMalformed is returned (wrapped) when a proc file cannot be parsed.
var ErrMalformed = errors.New("malformed proc file")

// Options configures a Reader or a Sampler. A nil *Options means all
// defaults.
type Options struct {
	// ProcRoot is where the proc filesystem is mounted. Default "/proc".
	ProcRoot string
	// PID is the process to observe. Default 0: the calling process
	// (/proc/self).
	PID int
	// Now is the clock used to stamp snapshots. Default time.Now.
	Now func() time.Time
}

// withDefaults returns a copy of o with every zero field set to its default.
func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.ProcRoot == "" {
		r.ProcRoot = procfs.DefaultMountPoint
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return r
}

// Snapshot is the state of a process at one instant.
type Snapshot struct {
	// Time is when the snapshot was taken.
	Time time.Time
	// User and Sys are the process's cumulative user and system CPU time.
	User, Sys time.Duration
	// RSSKiB is the current resident set size (VmRSS) in KiB.
	RSSKiB uint64
	// PeakRSSKiB is the peak resident set size (VmHWM) in KiB.
	PeakRSSKiB uint64
	// Threads is the number of threads of the process.
	Threads int
}

// CPU returns user + system CPU time.
func (s Snapshot) CPU() time.Duration { return s.User + s.Sys }

// FromProcfs builds a Snapshot from parsed procfs structures. It does no I/O.
// Fields that qemu-user fakes as 0 stay 0.
func FromProcfs(stat procfs.ProcStat, status procfs.ProcStatus, at time.Time) Snapshot {
	s := Snapshot{
		Time:       at,
		User:       time.Duration(stat.UTime) * TickDuration,
		Sys:        time.Duration(stat.STime) * TickDuration,
		RSSKiB:     status.VmRSS / 1024,
		PeakRSSKiB: status.VmHWM / 1024,
		Threads:    stat.NumThreads,
	}
	if s.PeakRSSKiB < s.RSSKiB {
		// VmHWM can lag VmRSS slightly (the kernel updates the high-water
		// mark lazily); the peak is never below the current value.
		s.PeakRSSKiB = s.RSSKiB
	}
	return s
}

// Reader reads snapshots of one process.
type Reader struct {
	fs   procfs.FS
	pid  int
	now  func() time.Time
	root string
}

// NewReader returns a Reader for opts.PID (default: the calling process)
// under opts.ProcRoot (default /proc).
func NewReader(opts *Options) (*Reader, error) {
	o := opts.withDefaults()
	fs, err := procfs.NewFS(o.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("open proc filesystem %s: %w", o.ProcRoot, err)
	}
	return &Reader{fs: fs, pid: o.PID, now: o.Now, root: o.ProcRoot}, nil
}

// proc resolves the observed process.
func (r *Reader) proc() (procfs.Proc, error) {
	if r.pid == 0 {
		p, err := r.fs.Self()
		if err != nil {
			return procfs.Proc{}, fmt.Errorf("resolve %s/self: %w", r.root, err)
		}
		return p, nil
	}
	p, err := r.fs.Proc(r.pid)
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("open process %d: %w", r.pid, err)
	}
	return p, nil
}

// parseErr wraps err from reading one of p's proc files: ErrMalformed when
// the file was read but did not parse.
func parseErr(pid int, file string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("read process %d %s: %w", pid, file, err)
	}
	return fmt.Errorf("read process %d %s: %w: %w", pid, file, ErrMalformed, err)
}

// Read takes a snapshot of the process.
func (r *Reader) Read() (snap Snapshot, err error) {
	p, err := r.proc()
	if err != nil {
		return Snapshot{}, err
	}
	// procfs slices its input without bounds checks in places (a stat file
	// ending right after the command name); turn such a panic into an error.
	defer func() {
		if v := recover(); v != nil {
			snap, err = Snapshot{}, fmt.Errorf("read process %d: %w: %v", p.PID, ErrMalformed, v)
		}
	}()
	stat, err := p.Stat()
	if err != nil {
		return Snapshot{}, parseErr(p.PID, "stat", err)
	}
	status, err := p.NewStatus()
	if err != nil {
		return Snapshot{}, parseErr(p.PID, "status", err)
	}
	return FromProcfs(stat, status, r.now()), nil
}

// Usage is what a process consumed between two snapshots.
type Usage struct {
	// Start and End are the snapshots at Sampler.Start and Sampler.Stop.
	Start, End Snapshot
	// Wall is the time between the snapshots.
	Wall time.Duration
	// User and Sys are the CPU time used between the snapshots.
	User, Sys time.Duration
	// PeakRSSKiB is the process's peak resident memory (VmHWM) at the end.
	PeakRSSKiB uint64
	// RSSKiB is the resident memory at the end.
	RSSKiB uint64
	// GCCycles is the number of Go garbage collections between the
	// snapshots; only counted when the observed process is the caller.
	GCCycles uint32
}

// CPU returns user + system CPU time used.
func (u Usage) CPU() time.Duration { return u.User + u.Sys }

// CPUPercent returns CPU time as a percentage of one core over Wall
// (0 if Wall is 0).
func (u Usage) CPUPercent() float64 {
	if u.Wall <= 0 {
		return 0
	}
	return 100 * float64(u.CPU()) / float64(u.Wall)
}

// CPUMsPer returns CPU milliseconds per item (e.g. per message); 0 if n <= 0.
func (u Usage) CPUMsPer(n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(u.CPU()) / float64(time.Millisecond) / float64(n)
}

// Between computes the Usage from start to end. It does no I/O.
// Counters that went backwards (a faked /proc) count as zero.
func Between(start, end Snapshot) Usage {
	u := Usage{
		Start:      start,
		End:        end,
		Wall:       end.Time.Sub(start.Time),
		PeakRSSKiB: max(end.PeakRSSKiB, start.PeakRSSKiB),
		RSSKiB:     end.RSSKiB,
	}
	if end.User > start.User {
		u.User = end.User - start.User
	}
	if end.Sys > start.Sys {
		u.Sys = end.Sys - start.Sys
	}
	return u
}

// Sampler measures a process between Start and Stop.
type Sampler struct {
	r       *Reader
	self    bool
	start   Snapshot
	startGC uint32
	started bool
}

// NewSampler returns a Sampler for the process opts describes.
func NewSampler(opts *Options) (*Sampler, error) {
	r, err := NewReader(opts)
	if err != nil {
		return nil, err
	}
	return &Sampler{r: r, self: r.pid == 0 && r.root == procfs.DefaultMountPoint}, nil
}

// Start takes the starting snapshot.
func (s *Sampler) Start() error {
	snap, err := s.r.Read()
	if err != nil {
		return fmt.Errorf("start sampler: %w", err)
	}
	s.start, s.started = snap, true
	if s.self {
		s.startGC = numGC()
	}
	return nil
}

// Stop takes the final snapshot and returns the usage since Start.
func (s *Sampler) Stop() (Usage, error) {
	if !s.started {
		return Usage{}, errors.New("stop sampler: Start was not called")
	}
	end, err := s.r.Read()
	if err != nil {
		return Usage{}, fmt.Errorf("stop sampler: %w", err)
	}
	u := Between(s.start, end)
	if s.self {
		u.GCCycles = numGC() - s.startGC
	}
	return u, nil
}

// numGC returns the number of completed GC cycles of this process.
func numGC() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}
