package startpages

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// residentExeKB sums the Rss of this process's read-only mappings of its
// own executable, from /proc/self/smaps.
func residentExeKB(t *testing.T) int {
	t.Helper()
	ino, err := exeInode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	kb, ours := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		if m, err := parseLine(line); err == nil { // a mapping's first line; its attribute lines ("Rss: 12 kB") do not parse
			ours = uint64(m.Inode) == uint64(ino) && m.ReadOnlyFile()
			continue
		}
		if f := strings.Fields(line); ours && len(f) == 3 && f[0] == "Rss:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("smaps %q: %v", line, err)
			}
			kb += n
		}
	}
	return kb
}

// TestRelease: the test binary's read-only pages mapped by its start-up
// are dropped, and the program goes on running (the pages it needs come
// back from the file).
func TestRelease(t *testing.T) {
	before := residentExeKB(t)
	if before == 0 {
		t.Fatal("no resident pages of the test binary found in /proc/self/smaps")
	}
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("Release advised no mapping of the executable")
	}
	after := residentExeKB(t)
	t.Logf("read-only pages of the executable resident: %d kB before, %d kB after (%d kB advised)", before, after, n>>10)
	if after >= before {
		t.Errorf("resident %d kB after Release, %d kB before: nothing given back", after, before)
	}
	// Still runs: code and read-only data come back from the file.
	if _, err := ParseMaps("00400000-00c3a000 r-xp 00000000 fe:01 1 /x\n"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRelease: one give-back, and the minor faults of the pages the
// benchmark's loop then maps back (the cost AfterGC adds per collection).
func BenchmarkRelease(b *testing.B) {
	for b.Loop() {
		if _, err := Release(); err != nil {
			b.Fatal(err)
		}
	}
}
