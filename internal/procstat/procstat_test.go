package procstat

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

const (
	// statAmd64 is /proc/PID/stat of cat(1) on the amd64 build host.
	statAmd64 = "9846 (cat) R 9843 9843 14035 0 -1 4194304 120 0 0 0 7 3 0 0 20 0 1 0 280446 3133440 413 18446744073709551615 94078230384640 94078230404521 140722251118272 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94078230420528 94078230422144 94078248906752 140722251123171 140722251123191 140722251123191 140722251124715 0\n"
	// statQemu is /proc/self/stat as qemu-arm-static fakes it.
	statQemu = "11058 (cap-arm) 0 10387 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 44443 0 0 0 0 0 1082132832 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	// statParens has a command name with spaces and parentheses.
	statParens = "7 (a) b (c)) S 1 7 7 0 -1 4194560 5 0 1 0 2 1 0 0 20 0 3 0 99 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{name: "amd64", in: statAmd64, want: Stat{Comm: "cat", State: "R", MinFlt: 120, UTime: 7, STime: 3, NumThreads: 1, StartTime: 280446, VSize: 3133440, RSS: 413}},
		{name: "qemu-user faked", in: statQemu, want: Stat{Comm: "cap-arm", State: "0", StartTime: 44443}},
		{name: "parentheses in comm", in: statParens, want: Stat{Comm: "a) b (c)", State: "S", MinFlt: 5, MajFlt: 1, UTime: 2, STime: 1, NumThreads: 3, StartTime: 99, VSize: 1000, RSS: 10}},
		{name: "ends after comm", in: "1 (x)", wantErr: true},
		{name: "no comm", in: "1 x S 0", wantErr: true},
		{name: "too few fields", in: "1 (x) S 0 0 0", wantErr: true},
		{name: "not a number", in: "1 (x) S 1 1 1 0 -1 0 z 0 0 0 0 0 0 0 20 0 1 0 1 1 1", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseStat: err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseStat =\n%+v, want\n%+v", got, tt.want)
			}
		})
	}
	if got := (Stat{UTime: 7, STime: 3}).CPUTime(); got != 100*time.Millisecond {
		t.Errorf("CPUTime = %v, want 100ms", got)
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Status
		wantErr bool
	}{
		{name: "process", in: "Name:\tcat\nVmPeak:\t 4682752 kB\nVmSize:\t 4617216 kB\nVmHWM:\t   43620 kB\nVmRSS:\t   43000 kB\nRssAnon:\t   36428 kB\nRssFile:\t    6572 kB\nThreads:\t5\n",
			want: Status{VmSize: 4617216 << 10, VmHWM: 43620 << 10, VmRSS: 43000 << 10, RssAnon: 36428 << 10, RssFile: 6572 << 10}},
		{name: "kernel thread", in: "Name:\tkthreadd\nState:\tS (sleeping)\nThreads:\t1\n", want: Status{}},
		{name: "no unit", in: "VmRSS:\t12\n", want: Status{VmRSS: 12 << 10}},
		{name: "not a number", in: "VmRSS: x kB\n", wantErr: true},
		{name: "empty value", in: "VmHWM:\n", wantErr: true},
		{name: "other unit", in: "VmRSS: 1 MB\n", wantErr: true},
		{name: "too large", in: "VmRSS: 18446744073709551615 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatus([]byte(tt.in))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseStatus: err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseStatus = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseIO(t *testing.T) {
	got, err := ParseIO([]byte("rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (IO{RChar: 6976, WChar: 12, SyscR: 10, SyscW: 2, ReadBytes: 4096, WriteBytes: 8192}); got != want {
		t.Errorf("ParseIO = %+v, want %+v", got, want)
	}
	if _, err := ParseIO([]byte("rchar: -1\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("ParseIO of a negative count: err = %v, want ErrMalformed", err)
	}
}

func TestParseBootTime(t *testing.T) {
	got, err := ParseBootTime([]byte("cpu  1 2 3\nintr 5\nctxt 9\nbtime 1796135522\nprocesses 10\n"))
	if err != nil || got != 1796135522 {
		t.Errorf("ParseBootTime = %d, %v; want 1796135522", got, err)
	}
	for _, in := range []string{"cpu 1\n", "btime x\n", ""} {
		if _, err := ParseBootTime([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseBootTime(%q): err = %v, want ErrMalformed", in, err)
		}
	}
}

// TestAgreesWithProcfs reads this test process's own files with both these
// parsers and github.com/prometheus/procfs (which quiot used before).
func TestAgreesWithProcfs(t *testing.T) {
	self, err := procfs.Self()
	if err != nil {
		t.Skipf("skipping: no procfs here: %v", err)
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := ParseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := self.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// CPU time and page faults move between the two reads; the rest not.
	if mine.Comm != theirs.Comm || mine.StartTime != theirs.Starttime || mine.UTime > uint64(theirs.UTime) || mine.STime > uint64(theirs.STime) || mine.MinFlt > uint64(theirs.MinFlt) {
		t.Errorf("ParseStat = %+v, procfs %+v", mine, theirs)
	}
	b, err = os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	bt, err := ParseBootTime(b)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	st, err := ps.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if bt != st.BootTime {
		t.Errorf("ParseBootTime = %d, procfs %d", bt, st.BootTime)
	}
	p, err := ReadProcess("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.VmRSS == 0 || p.Status.VmHWM < p.Status.VmRSS/2 || p.Stat.NumThreads < 1 {
		t.Errorf("ReadProcess(self) = %+v", p)
	}
}

func TestReadProcessErrors(t *testing.T) {
	if _, err := ReadProcess(t.TempDir(), 1); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadProcess of a missing pid: err = %v, want not exist", err)
	}
	if got := Dir("", 0); got != "/proc/self" {
		t.Errorf("Dir(\"\", 0) = %q", got)
	}
	if got := Dir("/x", 12); got != "/x/12" {
		t.Errorf("Dir(/x, 12) = %q", got)
	}
}

// FuzzParse feeds arbitrary bytes to every parser: a result or an error,
// never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{statAmd64, statQemu, statParens, "1 (x)", "VmRSS: 1 kB\n", "rchar: 1\n", "btime 5\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseStat(b)
		if s, err := ParseStatus(b); err == nil && s.VmRSS > 1<<63 {
			t.Errorf("VmRSS %d overflowed", s.VmRSS)
		}
		_, _ = ParseIO(b)
		_, _ = ParseBootTime(b)
	})
}
