package promexport

import (
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// tick is the length of one clock tick in /proc/PID/stat (USER_HZ, 100
// on every Linux architecture).
const tick = 10 * time.Millisecond

// procRoot is where the process metrics are read from.
const procRoot = "/proc"

// procReading is what the process_* families are written from; a part
// that could not be read is nil (its families are left out).
type procReading struct {
	stat     *procfs.ProcStat
	status   *procfs.ProcStatus
	io       *procfs.ProcIO
	bootTime uint64 // seconds since the epoch; 0: unknown
	openFDs  int    // -1: unknown
	maxFDs   uint64 // 0: unknown
	pageSize int
}

// readProc reads this process's figures under root; what it cannot read
// it leaves out.
func readProc(root string) procReading {
	r := procReading{openFDs: -1, pageSize: os.Getpagesize()}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return r
	}
	p, err := fs.Self()
	if err != nil {
		return r
	}
	if v, err := p.Stat(); err == nil {
		r.stat = &v
	}
	if v, err := p.NewStatus(); err == nil {
		r.status = &v
	}
	if v, err := p.IO(); err == nil {
		r.io = &v
	}
	if st, err := fs.Stat(); err == nil {
		r.bootTime = st.BootTime
	}
	if n, err := p.FileDescriptorsLen(); err == nil {
		r.openFDs = n
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		r.maxFDs = uint64(lim.Cur)
	}
	return r
}

func f64(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// writeProcess writes the process_* families (the names Prometheus'
// client libraries use) from r.
func writeProcess(w io.Writer, r procReading) {
	e := expo{w: w, prefix: "process_"}
	if st := r.stat; st != nil {
		tick := tick.Seconds()
		e.single("cpu_seconds_total", counter, "User and system CPU time spent in seconds.", f64(float64(st.UTime+st.STime)*tick))
		e.single("cpu_seconds_user_total", counter, "User CPU time spent in seconds.", f64(float64(st.UTime)*tick))
		e.single("cpu_seconds_system_total", counter, "System CPU time spent in seconds.", f64(float64(st.STime)*tick))
		e.single("major_pagefaults_total", counter, "Page faults that needed a read from disk.", u(uint64(st.MajFlt)))
		e.single("minor_pagefaults_total", counter, "Page faults served without disk access.", u(uint64(st.MinFlt)))
		e.single("num_threads", gauge, "Threads of the process.", i(st.NumThreads))
		var status procfs.ProcStatus
		if r.status != nil {
			status = *r.status
		}
		rss := status.VmRSS
		if rss == 0 && st.RSS > 0 {
			rss = uint64(st.RSS) * uint64(r.pageSize)
		}
		e.single("resident_memory_bytes", gauge, "Resident memory size in bytes (VmRSS).", u(rss))
		e.single("resident_memory_peak_bytes", gauge, "Peak resident memory size in bytes (VmHWM).", u(status.VmHWM))
		e.single("resident_memory_anon_bytes", gauge, "Resident anonymous memory in bytes (RssAnon).", u(status.RssAnon))
		e.single("resident_memory_file_bytes", gauge, "Resident file-backed memory in bytes (RssFile: the binary's pages among them).", u(status.RssFile))
		e.single("virtual_memory_bytes", gauge, "Virtual memory size in bytes.", u(uint64(st.VSize)))
		if r.bootTime > 0 {
			e.single("start_time_seconds", gauge, "Start time of the process since the Unix epoch in seconds.",
				f64(float64(r.bootTime)+float64(st.Starttime)*tick))
		}
	}
	if v := r.io; v != nil {
		e.single("io_read_bytes_total", counter, "Bytes read through read(2) and friends (rchar).", u(v.RChar))
		e.single("io_written_bytes_total", counter, "Bytes written through write(2) and friends (wchar).", u(v.WChar))
		e.single("io_read_syscalls_total", counter, "Read system calls (syscr).", u(v.SyscR))
		e.single("io_write_syscalls_total", counter, "Write system calls (syscw).", u(v.SyscW))
		e.single("io_storage_read_bytes_total", counter, "Bytes read from storage (read_bytes).", u(v.ReadBytes))
		e.single("io_storage_written_bytes_total", counter, "Bytes written to storage (write_bytes).", u(v.WriteBytes))
	}
	if r.openFDs >= 0 {
		e.single("open_fds", gauge, "Open file descriptors.", i(r.openFDs))
	}
	if r.maxFDs > 0 {
		e.single("max_fds", gauge, "Limit of open file descriptors (RLIMIT_NOFILE, soft).", u(r.maxFDs))
	}
}

// gcQuantiles are the quantiles of go_gc_duration_seconds.
var gcQuantiles = []string{"0", "0.25", "0.5", "0.75", "1"}

// writeGo writes the go_* families from the runtime.
func writeGo(w io.Writer) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, len(gcQuantiles))}
	debug.ReadGCStats(&gc)

	e := expo{w: w, prefix: "go_"}
	e.family("info", gauge, "Information about the Go environment.")
	e.sample("info", "1", "version", runtime.Version())
	e.single("goroutines", gauge, "Goroutines that currently exist.", i(runtime.NumGoroutine()))
	e.single("gomaxprocs", gauge, "GOMAXPROCS: the CPUs running Go code at once.", i(runtime.GOMAXPROCS(0)))
	e.family("gc_duration_seconds", "summary", "Stop-the-world pause durations of the garbage collector (the runtime's last 256 pauses for the quantiles).")
	for k, q := range gcQuantiles {
		e.sample("gc_duration_seconds", f64(gc.PauseQuantiles[k].Seconds()), "quantile", q)
	}
	e.sample("gc_duration_seconds_sum", f64(gc.PauseTotal.Seconds()))
	e.sample("gc_duration_seconds_count", strconv.FormatInt(gc.NumGC, 10))
	mem := []struct {
		name, typ, help string
		v               uint64
	}{
		{"memstats_alloc_bytes", gauge, "Bytes of allocated heap objects.", ms.Alloc},
		{"memstats_alloc_bytes_total", counter, "Bytes allocated for heap objects, total.", ms.TotalAlloc},
		{"memstats_sys_bytes", gauge, "Bytes of memory obtained from the OS.", ms.Sys},
		{"memstats_mallocs_total", counter, "Heap objects allocated, total.", ms.Mallocs},
		{"memstats_frees_total", counter, "Heap objects freed, total.", ms.Frees},
		{"memstats_heap_alloc_bytes", gauge, "Bytes of allocated heap objects.", ms.HeapAlloc},
		{"memstats_heap_sys_bytes", gauge, "Bytes of heap memory obtained from the OS.", ms.HeapSys},
		{"memstats_heap_idle_bytes", gauge, "Bytes in idle (unused) heap spans.", ms.HeapIdle},
		{"memstats_heap_inuse_bytes", gauge, "Bytes in in-use heap spans.", ms.HeapInuse},
		{"memstats_heap_released_bytes", gauge, "Bytes of physical memory returned to the OS.", ms.HeapReleased},
		{"memstats_heap_objects", gauge, "Allocated heap objects.", ms.HeapObjects},
		{"memstats_stack_inuse_bytes", gauge, "Bytes in stack spans.", ms.StackInuse},
		{"memstats_stack_sys_bytes", gauge, "Bytes of stack memory obtained from the OS.", ms.StackSys},
		{"memstats_next_gc_bytes", gauge, "Heap size target of the next GC cycle.", ms.NextGC},
		{"memstats_gc_sys_bytes", gauge, "Bytes of memory in garbage collection metadata.", ms.GCSys},
		{"memstats_other_sys_bytes", gauge, "Bytes of memory in miscellaneous off-heap runtime allocations.", ms.OtherSys},
	}
	for _, m := range mem {
		e.single(m.name, m.typ, m.help, u(m.v))
	}
	e.single("memstats_last_gc_time_seconds", gauge, "Time of the last garbage collection since the Unix epoch in seconds.",
		f64(float64(ms.LastGC)/1e9))
	e.single("memstats_gc_cpu_fraction", gauge, "Fraction of this program's CPU time used by the GC since the program started.", f64(ms.GCCPUFraction))
}
