//go:build linux

package gen

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/quiot/quiot/probe/netns"
	"golang.org/x/sys/unix"
)

type flows struct {
	fds    []int
	locals []netip.AddrPort
}

// openFlows opens n connected blocking UDP sockets (distinct source ports) in
// namespace ns.
func openFlows(ns string, dst netip.AddrPort, n int) (*flows, error) {
	f := &flows{}
	err := netns.Do(ns, func() error {
		family := unix.AF_INET
		var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().Unmap().As4()}
		if dst.Addr().Is6() && !dst.Addr().Is4In6() {
			family = unix.AF_INET6
			sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
		}
		for i := 0; i < n; i++ {
			fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("generator: udp socket %d: %w", i, err)
			}
			f.fds = append(f.fds, fd)
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
			if err := unix.Connect(fd, sa); err != nil {
				return fmt.Errorf("generator: connect to %s: %w", dst, err)
			}
			local, err := unix.Getsockname(fd)
			if err != nil {
				return fmt.Errorf("generator: getsockname: %w", err)
			}
			f.locals = append(f.locals, addrPort(local))
		}
		return nil
	})
	if err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

func addrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}

func (f *flows) write(i int, b []byte) error {
	for {
		_, err := unix.Write(f.fds[i], b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err
	}
}

func (f *flows) close() {
	for _, fd := range f.fds {
		unix.Close(fd)
	}
	f.fds = nil
}

var prevSlack int

// lockThread pins the sender to its OS thread and sets the thread's timer
// slack to 1 ns so that preciseSleep wakes close to its deadline.
func lockThread() {
	runtime.LockOSThread()
	if v, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil {
		prevSlack = v
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	}
}

func unlockThread() {
	if prevSlack > 0 {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(prevSlack), 0, 0, 0)
	}
	runtime.UnlockOSThread()
}

// preciseSleep blocks the thread in clock_nanosleep (high-resolution timer).
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for {
		var rem unix.Timespec
		err := unix.Nanosleep(&ts, &rem)
		if !errors.Is(err, unix.EINTR) {
			return
		}
		ts = rem
	}
}

// Sink is a bound UDP socket at the probe destination so that probe packets
// are not answered with ICMP port unreachable. It does not read: the kernel
// drops what overflows its receive buffer, which costs no CPU in this process.
type Sink struct {
	c *net.UDPConn
}

// NewSink binds a UDP socket to addr in namespace ns ("" = current).
func NewSink(ns string, addr netip.AddrPort) (*Sink, error) {
	var s Sink
	err := netns.Do(ns, func() error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return fmt.Errorf("udp sink on %s: %w", addr, err)
		}
		s.c = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	_ = s.c.SetReadBuffer(64 << 10)
	return &s, nil
}

// Addr returns the bound address.
func (s *Sink) Addr() netip.AddrPort { return s.c.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close releases the socket.
func (s *Sink) Close() error { return s.c.Close() }
