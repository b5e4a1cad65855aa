package startpages

import (
	"fmt"
	"os"
	"syscall"
)

// Release drops this process's mappings of its own executable's read-only
// segments (see the package doc) and returns how many bytes of address
// space it advised. Pages still in use come back on their next access.
func Release() (int64, error) {
	text, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("startpages: %w", err)
	}
	maps, err := ParseMaps(string(text))
	if err != nil {
		return 0, fmt.Errorf("startpages: /proc/self/maps: %w", err)
	}
	fi, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("startpages: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("startpages: no inode for /proc/self/exe")
	}
	var n int64
	for _, m := range maps {
		if m.Inode != uint64(st.Ino) || !m.ReadOnlyFile() {
			continue
		}
		// syscall.Madvise takes a []byte and this memory is not Go's, so
		// the raw system call (golang.org/x/sys/unix has the same shape).
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(m.Start), uintptr(m.End-m.Start), syscall.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("startpages: madvise %x-%x: %w", m.Start, m.End, e)
		}
		n += int64(m.End - m.Start)
	}
	return n, nil
}
