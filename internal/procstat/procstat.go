// Package procstat parses the few Linux proc files quiot reads about a
// process: /proc/PID/stat (CPU time, page faults, threads, start time,
// virtual size), /proc/PID/status (resident memory: VmRSS, VmHWM, RssAnon,
// RssFile), /proc/PID/io (bytes and calls of reads and writes) and the btime
// line of /proc/stat. The parsers take the file's bytes and do no I/O, so
// tests feed them fixtures; ReadProcess reads them under an injectable proc
// root.
//
// quiot used github.com/prometheus/procfs (internal/sysstat) and
// VictoriaMetrics/metrics' process collector (broker/promexport) for
// these. Both compile regexps in their package init (procfs about 25, the
// metrics library one), which ran in every quiot process (a publisher too),
// and together with the regexp engine, the Unicode tables it pulls in and
// the runtime/metrics descriptions they cost the ARMv6 binary about 370 KB
// of its 12 MB budget. These parsers read the same fields (ovsprobe still
// uses procfs).
//
// Under qemu-user, /proc/self/stat is faked and most of its fields read 0;
// the parsers accept that.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// TickDuration is the length of one clock tick in /proc/PID/stat. The
// kernel exports times in USER_HZ units, which is 100 on every Linux
// architecture (arm, arm64, amd64, 386).
const TickDuration = 10 * time.Millisecond

// ErrMalformed is returned (wrapped) when a proc file cannot be parsed.
var ErrMalformed = errors.New("malformed proc file")

// Stat is what quiot uses of /proc/PID/stat (proc(5)).
type Stat struct {
	// Comm is the command name (between the parentheses).
	Comm string
	// State is the process state letter ("R", "S", ...).
	State string
	// MinFlt and MajFlt count minor and major page faults.
	MinFlt, MajFlt uint64
	// UTime and STime are user and system CPU time in clock ticks.
	UTime, STime uint64
	// NumThreads is the number of threads.
	NumThreads int
	// StartTime is when the process started, in clock ticks after boot.
	StartTime uint64
	// VSize is the virtual memory size in bytes.
	VSize uint64
	// RSS is the resident set in pages.
	RSS int64
}

// statFields is how many fields after the command name Stat needs (up to
// and including rss, field 24 of proc(5)).
const statFields = 22

// ParseStat parses the content of /proc/PID/stat.
func ParseStat(b []byte) (Stat, error) {
	l := bytes.IndexByte(b, '(')
	r := bytes.LastIndexByte(b, ')')
	if l < 0 || r < l {
		return Stat{}, fmt.Errorf("stat: %w: no (comm)", ErrMalformed)
	}
	f := bytes.Fields(b[r+1:])
	if len(f) < statFields {
		return Stat{}, fmt.Errorf("stat: %w: %d fields after the command name, want at least %d", ErrMalformed, len(f), statFields)
	}
	s := Stat{Comm: string(b[l+1 : r]), State: string(f[0])}
	var err error
	num := func(i int) uint64 {
		v, perr := strconv.ParseUint(string(f[i]), 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("stat: %w: field %d: %v", ErrMalformed, i+3, perr)
		}
		return v
	}
	s.MinFlt = num(7)
	s.MajFlt = num(9)
	s.UTime = num(11)
	s.STime = num(12)
	threads, terr := strconv.ParseInt(string(f[17]), 10, 32)
	if terr != nil && err == nil {
		err = fmt.Errorf("stat: %w: num_threads: %v", ErrMalformed, terr)
	}
	s.NumThreads = int(threads)
	s.StartTime = num(19)
	s.VSize = num(20)
	rss, rerr := strconv.ParseInt(string(f[21]), 10, 64)
	if rerr != nil && err == nil {
		err = fmt.Errorf("stat: %w: rss: %v", ErrMalformed, rerr)
	}
	s.RSS = rss
	if err != nil {
		return Stat{}, err
	}
	return s, nil
}

// CPUTime is the user plus system CPU time.
func (s Stat) CPUTime() time.Duration { return time.Duration(s.UTime+s.STime) * TickDuration }

// Status is what quiot uses of /proc/PID/status, in bytes. A field the
// file lacks (a kernel thread has no Vm lines) is 0.
type Status struct {
	// VmRSS is the resident set now; VmHWM its peak.
	VmRSS, VmHWM uint64
	// RssAnon and RssFile split VmRSS into anonymous memory and mapped
	// files (the binary's own pages among them).
	RssAnon, RssFile uint64
	// VmSize is the virtual memory size.
	VmSize uint64
}

// ParseStatus parses the content of /proc/PID/status.
func ParseStatus(b []byte) (Status, error) {
	var s Status
	fields := map[string]*uint64{"VmRSS": &s.VmRSS, "VmHWM": &s.VmHWM, "RssAnon": &s.RssAnon, "RssFile": &s.RssFile, "VmSize": &s.VmSize}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		dst := fields[string(k)]
		if dst == nil {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 || len(f) > 2 || len(f) == 2 && string(f[1]) != "kB" {
			return Status{}, fmt.Errorf("status: %w: %s: %q", ErrMalformed, k, v)
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil || n > 1<<53 {
			return Status{}, fmt.Errorf("status: %w: %s: %q", ErrMalformed, k, v)
		}
		*dst = n * 1024
	}
	return s, nil
}

// IO is /proc/PID/io: characters read and written through read(2) and
// write(2) and their calls, and the bytes that reached storage.
type IO struct {
	RChar, WChar, SyscR, SyscW, ReadBytes, WriteBytes uint64
}

// ParseIO parses the content of /proc/PID/io.
func ParseIO(b []byte) (IO, error) {
	var s IO
	fields := map[string]*uint64{"rchar": &s.RChar, "wchar": &s.WChar, "syscr": &s.SyscR, "syscw": &s.SyscW,
		"read_bytes": &s.ReadBytes, "write_bytes": &s.WriteBytes}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		dst := fields[string(k)]
		if dst == nil {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return IO{}, fmt.Errorf("io: %w: %s: %q", ErrMalformed, k, v)
		}
		*dst = n
	}
	return s, nil
}

// ParseBootTime returns the btime line of /proc/stat: the boot time in
// seconds since the Unix epoch.
func ParseBootTime(b []byte) (uint64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("stat: %w: btime %q", ErrMalformed, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("stat: %w: no btime line", ErrMalformed)
}

// Process is one reading of a process's stat and status files.
type Process struct {
	Stat   Stat
	Status Status
}

// ReadProcess reads and parses root/PID/stat and root/PID/status; pid 0
// means root/self. root "" means /proc.
func ReadProcess(root string, pid int) (Process, error) {
	dir := Dir(root, pid)
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Process{}, fmt.Errorf("process stat: %w", err)
	}
	st, err := ParseStat(b)
	if err != nil {
		return Process{}, err
	}
	if b, err = os.ReadFile(filepath.Join(dir, "status")); err != nil {
		return Process{}, fmt.Errorf("process status: %w", err)
	}
	ss, err := ParseStatus(b)
	if err != nil {
		return Process{}, err
	}
	return Process{Stat: st, Status: ss}, nil
}

// Dir is the proc directory of pid under root (pid 0: self; root "": /proc).
func Dir(root string, pid int) string {
	if root == "" {
		root = "/proc"
	}
	if pid == 0 {
		return filepath.Join(root, "self")
	}
	return filepath.Join(root, strconv.Itoa(pid))
}
