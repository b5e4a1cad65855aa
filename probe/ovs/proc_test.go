package ovs

import (
	"os"
	"testing"
	"time"
)

func TestSampleProcessFixture(t *testing.T) {
	s, err := SampleProcess("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	// utime+stime = 200 ticks at 100 Hz; rss 4608 pages.
	if s.CPUSeconds != 2 {
		t.Errorf("CPUSeconds = %v, want 2", s.CPUSeconds)
	}
	if want := int64(4608 * os.Getpagesize()); s.RSSBytes != want {
		t.Errorf("RSSBytes = %d, want %d", s.RSSBytes, want)
	}
	if s.PeakRSSBytes != 20480*1024 {
		t.Errorf("PeakRSSBytes = %d", s.PeakRSSBytes)
	}
	if _, err := SampleProcess("testdata/proc", 1); err == nil {
		t.Error("missing process should fail")
	}
	m, err := HostMemAvailable("testdata/proc")
	if err != nil || m != 24255180*1024 {
		t.Errorf("HostMemAvailable = %d, %v", m, err)
	}
	if l, err := HostLoad1("testdata/proc"); err != nil || l != 0.5 {
		t.Errorf("HostLoad1 = %v, %v", l, err)
	}
	a := ProcSample{At: time.Unix(0, 0), CPUSeconds: 1}
	b := ProcSample{At: time.Unix(2, 0), CPUSeconds: 2}
	if got := CPUPercent(a, b); got != 50 {
		t.Errorf("CPUPercent = %v, want 50", got)
	}
	if got := CPUPercent(b, b); got != 0 {
		t.Errorf("CPUPercent same instant = %v", got)
	}
}
