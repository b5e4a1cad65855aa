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
	ino, err := exeInode()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range maps {
		if m.Inode != ino || !m.ReadOnlyFile() {
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

// exeInode returns the inode of this process's executable. It opens
// /proc/self/exe and asks the open file, rather than stat the link: under
// a user-mode emulator (qemu-arm-static, how the Pi build is measured,
// docs/BENCH.md) a stat of /proc/self/exe gives the emulator's own binary,
// while an open of it gives the guest's, as on a real kernel.
func exeInode() (uint64, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("startpages: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("startpages: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("startpages: no inode for /proc/self/exe")
	}
	return uint64(st.Ino), nil
}
