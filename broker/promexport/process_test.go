package promexport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

func TestWriteProcess(t *testing.T) {
	st := &procfs.ProcStat{UTime: 150, STime: 50, MinFlt: 7, MajFlt: 1, NumThreads: 5, Starttime: 1000, VSize: 4096, RSS: 3}
	status := &procfs.ProcStatus{VmRSS: 12 << 20, VmHWM: 14 << 20, RssAnon: 3 << 20, RssFile: 9 << 20}
	tests := []struct {
		name      string
		r         procReading
		want, not []string
	}{
		{
			name: "everything",
			r:    procReading{stat: st, status: status, io: &procfs.ProcIO{RChar: 10, WChar: 20}, bootTime: 1_700_000_000, openFDs: 9, maxFDs: 1024, pageSize: 4096},
			want: []string{"\nprocess_cpu_seconds_total 2\n", "\nprocess_cpu_seconds_user_total 1.5\n", "\nprocess_resident_memory_bytes 12582912\n",
				"\nprocess_resident_memory_peak_bytes 14680064\n", "\nprocess_resident_memory_file_bytes 9437184\n", "\nprocess_start_time_seconds 1.70000001e+09\n",
				"\nprocess_num_threads 5\n", "\nprocess_io_read_bytes_total 10\n", "\nprocess_open_fds 9\n", "\nprocess_max_fds 1024\n",
				"\n# TYPE process_cpu_seconds_total counter\n", "\n# TYPE process_resident_memory_bytes gauge\n"},
		},
		{
			// /proc unreadable: the families it feeds are left out, never zeros.
			name: "nothing readable",
			r:    procReading{openFDs: -1},
			not:  []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds", "process_io_", "process_start_time_seconds"},
		},
		{
			// A status without VmRSS (qemu-user may give one): RSS pages from stat.
			name: "rss from stat",
			r:    procReading{stat: &procfs.ProcStat{RSS: 3}, openFDs: -1, pageSize: 4096},
			want: []string{"\nprocess_resident_memory_bytes 12288\n"},
			not:  []string{"process_start_time_seconds"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			b.WriteString("\n")
			writeProcess(&b, tt.r)
			got := b.String()
			if err := checkExposition(strings.TrimPrefix(got, "\n")); err != nil {
				t.Fatalf("%v\n%s", err, got)
			}
			for _, s := range tt.want {
				if !strings.Contains(got, s) {
					t.Errorf("no %q in:\n%s", s, got)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(got, s) {
					t.Errorf("%q in:\n%s", s, got)
				}
			}
		})
	}
}

func TestWriteGo(t *testing.T) {
	var b bytes.Buffer
	writeGo(&b)
	got := b.String()
	if err := checkExposition(got); err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	for _, s := range []string{"\ngo_goroutines ", "\n# TYPE go_gc_duration_seconds summary\n", `go_gc_duration_seconds{quantile="0.5"} `,
		"\ngo_gc_duration_seconds_count ", "\ngo_memstats_heap_inuse_bytes ", "go_info{version=\"go"} {
		if !strings.Contains(got, s) {
			t.Errorf("no %q in:\n%s", s, got)
		}
	}
}
