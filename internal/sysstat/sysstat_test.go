package sysstat

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var fixedTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fixedNow() time.Time { return fixedTime }

func TestReaderFixtures(t *testing.T) {
	tests := []struct {
		name string
		root string
		pid  int
		want Snapshot
	}{
		{
			name: "amd64 self",
			root: "testdata/amd64/proc",
			want: Snapshot{User: 330 * time.Millisecond, Sys: 10 * time.Millisecond, RSSKiB: 22920, PeakRSSKiB: 22920, Threads: 4},
		},
		{
			name: "amd64 by pid",
			root: "testdata/amd64/proc",
			pid:  10437,
			want: Snapshot{User: 330 * time.Millisecond, Sys: 10 * time.Millisecond, RSSKiB: 22920, PeakRSSKiB: 22920, Threads: 4},
		},
		{
			// /proc/self/stat as qemu-arm-static fakes it: CPU times read 0.
			name: "qemu-user arm faked stat",
			root: "testdata/qemuarm/proc",
			want: Snapshot{RSSKiB: 43620, PeakRSSKiB: 43620},
		},
		{
			name: "pi zero armv6",
			root: "testdata/pizero/proc",
			want: Snapshot{User: 12340 * time.Millisecond, Sys: 5670 * time.Millisecond, RSSKiB: 12844, PeakRSSKiB: 14188, Threads: 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(&Options{ProcRoot: tt.root, PID: tt.pid, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Read()
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Time = fixedTime
			if got != tt.want {
				t.Errorf("Read() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewReader(&Options{ProcRoot: filepath.Join(dir, "missing")}); err == nil {
		t.Error("NewReader on a missing root: no error")
	}
	r, err := NewReader(&Options{ProcRoot: "testdata/amd64/proc", PID: 999999})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); err == nil {
		t.Error("Read of a missing pid: no error")
	}
	// A stat file that ends right after the command name.
	writeProc(t, dir, []byte("1 (x)"), []byte("VmHWM: 1 kB\n"))
	r, err = NewReader(&Options{ProcRoot: dir, PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Read of truncated stat: err = %v, want ErrMalformed", err)
	}
}

func TestBetween(t *testing.T) {
	t0 := fixedTime
	tests := []struct {
		name       string
		start, end Snapshot
		wantCPU    time.Duration
		wantPct    float64
		wantPerMsg float64 // for 10 messages
	}{
		{"normal", Snapshot{Time: t0, User: time.Second, Sys: 100 * time.Millisecond},
			Snapshot{Time: t0.Add(2 * time.Second), User: 1500 * time.Millisecond, Sys: 200 * time.Millisecond, PeakRSSKiB: 10},
			600 * time.Millisecond, 30, 60},
		{"qemu zeros", Snapshot{Time: t0}, Snapshot{Time: t0.Add(time.Second)}, 0, 0, 0},
		{"backwards", Snapshot{Time: t0, User: time.Second}, Snapshot{Time: t0.Add(time.Second)}, 0, 0, 0},
		{"zero wall", Snapshot{Time: t0}, Snapshot{Time: t0, User: time.Second}, time.Second, 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := Between(tt.start, tt.end)
			if u.CPU() != tt.wantCPU {
				t.Errorf("CPU = %v, want %v", u.CPU(), tt.wantCPU)
			}
			if u.CPUPercent() != tt.wantPct {
				t.Errorf("CPUPercent = %v, want %v", u.CPUPercent(), tt.wantPct)
			}
			if got := u.CPUMsPer(10); got != tt.wantPerMsg {
				t.Errorf("CPUMsPer(10) = %v, want %v", got, tt.wantPerMsg)
			}
		})
	}
	if got := (Usage{User: time.Second}).CPUMsPer(0); got != 0 {
		t.Errorf("CPUMsPer(0) = %v, want 0", got)
	}
}

// TestSamplerSelf reads the real /proc of the test process.
func TestSamplerSelf(t *testing.T) {
	s, err := NewSampler(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stop(); err == nil {
		t.Error("Stop before Start: no error")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if s.start.Threads == 0 {
		// A real process has at least one thread: this stat file is faked.
		t.Skip("skipping CPU check: /proc/self/stat is faked (qemu-user)")
	}
	// Burn CPU until the kernel's tick accounting shows some (bounded).
	var u Usage
	deadline := time.Now().Add(5 * time.Second)
	sink := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			sink += i
		}
		if u, err = s.Stop(); err != nil {
			t.Fatal(err)
		}
		if u.CPU() > 0 {
			break
		}
	}
	_ = sink
	if u.CPU() == 0 {
		t.Error("no CPU time seen after burning CPU")
	}
	if u.PeakRSSKiB == 0 || u.RSSKiB == 0 || u.PeakRSSKiB < u.RSSKiB {
		t.Errorf("rss = %d KiB, peak = %d KiB", u.RSSKiB, u.PeakRSSKiB)
	}
	if u.Wall <= 0 {
		t.Errorf("wall = %v", u.Wall)
	}
}

func writeProc(t testing.TB, root string, stat, status []byte) {
	t.Helper()
	d := filepath.Join(root, "1")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "stat"), stat, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "status"), status, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzRead feeds arbitrary stat and status files through the Reader: it must
// return a snapshot or an error, never panic.
func FuzzRead(f *testing.F) {
	for _, dir := range []string{"testdata/amd64/proc/10437", "testdata/qemuarm/proc/11058", "testdata/pizero/proc/812"} {
		st, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			f.Fatal(err)
		}
		ss, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(st, ss)
	}
	f.Fuzz(func(t *testing.T, stat, status []byte) {
		root := t.TempDir()
		writeProc(t, root, stat, status)
		r, err := NewReader(&Options{ProcRoot: root, PID: 1})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := r.Read()
		if err == nil && snap.PeakRSSKiB < snap.RSSKiB {
			t.Errorf("peak %d < rss %d", snap.PeakRSSKiB, snap.RSSKiB)
		}
	})
}
