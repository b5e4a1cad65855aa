//go:build !linux

package mqtt

import (
	"errors"
	"net"
	"syscall"
)

// pollSupported: the poller runs on Linux only; elsewhere every client
// keeps its read loop.
const pollSupported = false

type epoll struct{}

type pollEvent struct {
	fd   int
	wake bool
}

var errNoPoll = errors.New("no poller on this system")

func newEpoll() (*epoll, error)                   { return nil, errNoPoll }
func (*epoll) add(int, bool) error                { return errNoPoll }
func (*epoll) mod(int, bool) error                { return errNoPoll }
func (*epoll) del(int)                            {}
func (*epoll) wait([]pollEvent, int) (int, error) { return 0, errNoPoll }
func (*epoll) wake()                              {}
func (*epoll) close()                             {}

func pollableConn(net.Conn) (syscall.RawConn, ReadFollower, bool) { return nil, nil, false }

type rawRead struct{}

func (*rawRead) read(syscall.RawConn, []byte) (int, error) { return 0, errNoPoll }
