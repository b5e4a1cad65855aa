//go:build linux && !race

package mqtt

import (
	"syscall"
	"unsafe"
)

// sysWrite writes b to fd with one raw write(2), unseen by the scheduler
// (rawWrite.do says why). b is not empty.
func sysWrite(fd uintptr, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
