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

// sysRead reads from fd into b with one raw read(2), unseen by the
// scheduler as sysWrite's write is: the poller's reads of ready sockets
// never wait (the sockets are non-blocking), and through syscall.Read
// each marked the processor as in a system call, which kept the runtime's
// monitor thread ticking at its shortest interval (QUIOT.md, change 26).
// b is not empty.
func sysRead(fd uintptr, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return -1, errno
	}
	return int(n), nil
}

// sysEpollTake takes the ready events of the epoll instance epfd without
// waiting (a timeout of 0), with a raw epoll_wait(2) for sysRead's reason.
// events is not empty.
func sysEpollTake(epfd uintptr, events []syscall.EpollEvent) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
