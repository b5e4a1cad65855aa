//go:build linux

package mqtt

import (
	"io"
	"net"
	"syscall"
)

// pollSupported: the poller runs on Linux (epoll).
const pollSupported = true

// epollIn is what a polled socket is watched for: bytes to read, or the
// peer's end (level-triggered: a socket with bytes left stays ready).
const epollIn = syscall.EPOLLIN | syscall.EPOLLRDHUP

// epoll is the poller's epoll instance and the pipe that wakes it.
type epoll struct {
	fd     int
	wakeR  int
	wakeW  int
	events []syscall.EpollEvent
}

// pollEvent is a ready socket, or the wake-up.
type pollEvent struct {
	fd   int
	wake bool
}

// newEpoll returns an epoll instance watching its wake-up pipe.
func newEpoll() (*epoll, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var pipe [2]int
	if err := syscall.Pipe2(pipe[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	e := &epoll{fd: fd, wakeR: pipe[0], wakeW: pipe[1]}
	if err := syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, e.wakeR, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(e.wakeR)}); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// add watches fd, for reading if on (else not yet: mod turns it on).
func (e *epoll) add(fd int, on bool) error {
	var ev uint32
	if on {
		ev = epollIn
	}
	return syscall.EpollCtl(e.fd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: ev, Fd: int32(fd)})
}

// mod watches fd for reading (on) or not at all (off, while a worker
// reads it).
func (e *epoll) mod(fd int, on bool) error {
	var ev uint32
	if on {
		ev = epollIn
	}
	return syscall.EpollCtl(e.fd, syscall.EPOLL_CTL_MOD, fd, &syscall.EpollEvent{Events: ev, Fd: int32(fd)})
}

// del stops watching fd.
func (e *epoll) del(fd int) {
	_ = syscall.EpollCtl(e.fd, syscall.EPOLL_CTL_DEL, fd, nil)
}

// wait waits up to msec for ready sockets and puts them in out.
func (e *epoll) wait(out []pollEvent, msec int) (int, error) {
	if len(e.events) < len(out) {
		e.events = make([]syscall.EpollEvent, len(out))
	}
	n, err := syscall.EpollWait(e.fd, e.events[:len(out)], msec)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		fd := int(e.events[i].Fd)
		out[i] = pollEvent{fd: fd, wake: fd == e.wakeR}
	}
	return n, nil
}

// wake makes a wait return.
func (e *epoll) wake() {
	_, _ = syscall.Write(e.wakeW, []byte{1})
}

// close closes the instance and its pipe.
func (e *epoll) close() {
	_ = syscall.Close(e.wakeR)
	_ = syscall.Close(e.wakeW)
	_ = syscall.Close(e.fd)
}

// pollableConn returns the socket of c and, if c follows its reads, the
// follower; ok is false if c cannot be polled (no socket of its own: TLS,
// WebSocket, QUIC, pipes; or a wrapper whose Read may do more).
func pollableConn(c net.Conn) (rc syscall.RawConn, fl ReadFollower, ok bool) {
	rc = rawOf(c)
	if rc == nil {
		return nil, nil, false
	}
	switch v := c.(type) {
	case ReadFollower:
		return rc, v, true
	case *net.TCPConn:
		return rc, nil, true
	}
	return nil, nil, false
}

// rawRead is the poller's non-blocking read of a socket; its do method
// is bound once (a closure handed to RawConn.Read on every read would be
// allocated on every read). Only the poller's goroutine uses it.
type rawRead struct {
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// do reads into r.b from fd once; true: RawConn.Read never waits.
func (r *rawRead) do(fd uintptr) bool {
	r.n, r.err = syscall.Read(int(fd), r.b)
	return true
}

// read reads from rc's socket what it has now, without waiting: (0, nil)
// if it has nothing yet, io.EOF at its end.
func (r *rawRead) read(rc syscall.RawConn, p []byte) (int, error) {
	if r.fn == nil {
		r.fn = r.do
	}
	r.b = p
	err := rc.Read(r.fn)
	n, rerr := r.n, r.err
	r.b, r.n, r.err = nil, 0, nil
	if err != nil {
		return 0, err // closed
	}
	switch {
	case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
		return 0, nil
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: rerr}
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}
