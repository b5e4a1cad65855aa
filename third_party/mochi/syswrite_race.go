//go:build linux && race

package mqtt

import "syscall"

// sysWrite writes b to fd with syscall.Write under the race detector: a
// raw system call would not tell the detector that what was written
// happened before what the peer reads (syscall.Write and syscall.Read
// carry that edge), and tests that wait for a delivery on the wire would
// report races that are not there.
func sysWrite(fd uintptr, b []byte) (int, error) {
	n, err := syscall.Write(int(fd), b)
	if n < 0 {
		n = 0
	}
	return n, err
}

// sysRead reads from fd into b with syscall.Read under the race detector,
// for sysWrite's reason.
func sysRead(fd uintptr, b []byte) (int, error) {
	return syscall.Read(int(fd), b)
}

// sysEpollTake takes the ready events of epfd without waiting.
func sysEpollTake(epfd uintptr, events []syscall.EpollEvent) (int, error) {
	return syscall.EpollWait(int(epfd), events, 0)
}
