package mqtt

import (
	"net"
	"sync"
	"syscall"
)

// rawOf returns the socket under c for writes that do not wait
// (Client.writeNow), or nil if c does not hand one out. quiot: QUIOT.md,
// change 17.
func rawOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// rawWrite is one write to a socket that does not wait; its do method is
// made once per rawWrite (a method value handed to RawConn.Write
// allocates), and rawWrites are pooled.
type rawWrite struct {
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// do writes w.b to fd once. Go's sockets are non-blocking: a full socket
// returns EAGAIN at once. It returns true so that RawConn.Write never
// waits for the socket to become writable.
//
// The write is a raw system call (sysWrite), which the scheduler does
// not see: a
// goroutine in syscall.Write marks its processor as in a system call, and
// the scheduler's monitor, finding it there on its next tick (20 µs while
// it finds work), hands the processor to another thread and keeps
// ticking at 20 µs. A fan-out of a hundred writes in a row did that on
// almost every one (docs/BENCH.md). A write that cannot wait does not need
// its processor handed off.
func (w *rawWrite) do(fd uintptr) bool {
	w.n, w.err = 0, nil
	if len(w.b) == 0 {
		return true
	}
	w.n, w.err = sysWrite(fd, w.b)
	return true
}

var rawWrites = sync.Pool{New: func() any {
	w := new(rawWrite)
	w.fn = w.do
	return w
}}

// writeNoWait writes as much of b to rc as its socket takes without
// waiting: errWouldWait if it takes nothing now.
func writeNoWait(rc syscall.RawConn, b []byte) (int, error) {
	w := rawWrites.Get().(*rawWrite)
	w.b = b
	err := rc.Write(w.fn)
	n, werr := w.n, w.err
	w.b, w.n, w.err = nil, 0, nil
	rawWrites.Put(w)
	if err != nil { // the connection is closed, or its deadline passed
		return 0, err
	}
	switch werr {
	case nil:
		return n, nil
	case syscall.EAGAIN, syscall.EINTR:
		return n, errWouldWait
	}
	return n, werr
}
