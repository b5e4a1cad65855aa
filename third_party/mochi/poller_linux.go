//go:build linux

package mqtt

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// pollSupported: the poller runs on Linux (epoll).
const pollSupported = true

// epollIn is what a polled socket is watched for: bytes to read, or the
// peer's end (level-triggered: a socket with bytes left stays ready).
const epollIn = syscall.EPOLLIN | syscall.EPOLLRDHUP

// epoll is the poller's epoll instance. The instance itself is waited
// for in Go's own network poller (as an *os.File: an epoll descriptor is
// readable while it has ready events), and its events are taken without
// blocking: no OS thread sleeps in epoll_wait, and a busy runtime picks
// the poller up as it picks up any goroutine whose socket is ready. A
// thread of its own blocked in epoll_wait cost a context switch per wake,
// system time that outweighed the read loops' (docs/BENCH.md).
type epoll struct {
	f        *os.File
	rc       syscall.RawConn
	events   []syscall.EpollEvent
	n        int
	err      error
	fn       func(fd uintptr) bool // takeEvents, bound once
	deadline time.Time
}

// pollEvent is a ready socket.
type pollEvent struct {
	fd   int
	wake bool // unused on Linux: stop closes the instance
}

// newEpoll returns an epoll instance registered with Go's poller.
func newEpoll() (*epoll, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "mqtt-poller")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	e := &epoll{f: f, rc: rc}
	e.fn = e.takeEvents
	return e, nil
}

// ctl runs epoll_ctl on the instance, unless it is closed.
func (e *epoll) ctl(op, fd int, ev uint32) error {
	var err error
	cerr := e.rc.Control(func(efd uintptr) {
		if op == syscall.EPOLL_CTL_DEL {
			err = syscall.EpollCtl(int(efd), op, fd, nil)
			return
		}
		err = syscall.EpollCtl(int(efd), op, fd, &syscall.EpollEvent{Events: ev, Fd: int32(fd)})
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// add watches fd, for reading if on (else not yet: mod turns it on).
func (e *epoll) add(fd int, on bool) error {
	var ev uint32
	if on {
		ev = epollIn
	}
	return e.ctl(syscall.EPOLL_CTL_ADD, fd, ev)
}

// mod watches fd for reading (on) or not at all (off, while a worker
// reads it).
func (e *epoll) mod(fd int, on bool) error {
	var ev uint32
	if on {
		ev = epollIn
	}
	return e.ctl(syscall.EPOLL_CTL_MOD, fd, ev)
}

// del stops watching fd.
func (e *epoll) del(fd int) {
	_ = e.ctl(syscall.EPOLL_CTL_DEL, fd, 0)
}

// takeEvents takes the ready events without blocking; false (nothing
// ready) has Go's poller wait for the instance to become readable.
func (e *epoll) takeEvents(fd uintptr) bool {
	e.n, e.err = sysEpollTake(fd, e.events)
	if e.err == syscall.EINTR {
		e.n, e.err = 0, nil
	}
	return e.n > 0 || e.err != nil
}

// wait waits for ready sockets and puts them in out: (0, nil) once a
// second without any (the sweep's tick), an error once closed.
func (e *epoll) wait(out []pollEvent, _ int) (int, error) {
	if len(e.events) < len(out) {
		e.events = make([]syscall.EpollEvent, len(out))
	}
	e.events = e.events[:len(out)]
	if now := time.Now(); !now.Before(e.deadline) {
		e.deadline = now.Add(time.Second)
		if err := e.f.SetReadDeadline(e.deadline); err != nil {
			return 0, err
		}
	}
	if err := e.rc.Read(e.fn); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, err
	}
	if e.err != nil {
		return 0, e.err
	}
	for i := 0; i < e.n; i++ {
		out[i] = pollEvent{fd: int(e.events[i].Fd)}
	}
	return e.n, nil
}

// wake ends a wait for good: the instance is closed.
func (e *epoll) wake() { _ = e.f.Close() }

// close closes the instance.
func (e *epoll) close() { _ = e.f.Close() }

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
	r.n, r.err = sysRead(fd, r.b)
	return true
}

// read reads from rc's socket what it has now, without waiting: (0, nil)
// if it has nothing yet, io.EOF at its end.
func (r *rawRead) read(rc syscall.RawConn, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // sysRead reads into a buffer with room
	}
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
