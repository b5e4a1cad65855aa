//go:build linux

package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// addrWatch follows the addresses of the network namespace of the client's
// socket: it calls a function after every address or route added or removed
// (rtnetlink RTM_NEWADDR, RTM_DELADDR, RTM_NEWROUTE, RTM_DELROUTE: a default
// route may come back after the address) and tells which source address
// the kernel now picks towards a peer.
type addrWatch struct {
	u *net.UDPConn // the client's socket: its namespace is the one watched
}

// watchAddresses calls fn, from a goroutine of its own, after every address
// or route change in the network namespace of u's socket, until ctx ends.
func watchAddresses(ctx context.Context, u *net.UDPConn, fn func()) (*addrWatch, error) {
	w := &addrWatch{u: u}
	var fd int
	err := w.inNS(func() error {
		var err error
		fd, err = openNetlinkAddr()
		return err
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "rtnetlink") // non-blocking: reads use the poller, Close ends them
	go func() {
		<-ctx.Done()
		_ = f.Close()
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if errors.Is(err, syscall.ENOBUFS) {
				fn() // events were dropped: assume a change
				continue
			}
			if err != nil {
				return
			}
			msgs, err := syscall.ParseNetlinkMessage(buf[:n])
			if err != nil {
				continue
			}
			for _, m := range msgs {
				switch m.Header.Type {
				case unix.RTM_NEWADDR, unix.RTM_DELADDR, unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
					fn()
				}
			}
		}
	}()
	return w, nil
}

// source returns the address the kernel picks to send to remote from an
// unbound socket now (a route lookup: connect on a UDP socket sends
// nothing); an error when there is no route.
func (w *addrWatch) source(remote *net.UDPAddr) (netip.Addr, error) {
	var src netip.Addr
	err := w.inNS(func() error {
		c, err := net.DialUDP("udp", nil, remote)
		if err != nil {
			return err
		}
		defer c.Close()
		src = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		return nil
	})
	return src, err
}

// inNS runs fn in the network namespace of the client's socket: directly
// when that is the caller's (always, but in tests that make sockets in
// other namespaces), else on a thread switched into it, which takes
// CAP_NET_ADMIN to find the namespace and CAP_SYS_ADMIN to enter it.
func (w *addrWatch) inNS(fn func() error) error {
	nsfd := -1
	if rc, err := w.u.SyscallConn(); err == nil {
		_ = rc.Control(func(s uintptr) {
			if fd, err := unix.IoctlRetInt(int(s), unix.SIOCGSKNS); err == nil {
				nsfd = fd
			}
		})
	}
	if nsfd < 0 {
		return fn()
	}
	defer unix.Close(nsfd)
	done := make(chan error, 1)
	go func() {
		// A goroutine of its own: if its thread cannot be switched
		// back, it stays locked and ends with the goroutine.
		runtime.LockOSThread()
		var here, there unix.Stat_t
		if unix.Fstat(nsfd, &there) == nil && unix.Stat("/proc/thread-self/ns/net", &here) == nil &&
			here.Dev == there.Dev && here.Ino == there.Ino {
			runtime.UnlockOSThread()
			done <- fn()
			return
		}
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open the current network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the socket's network namespace: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("return from the socket's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

func openNetlinkAddr() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return -1, fmt.Errorf("rtnetlink socket: %w", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR |
		unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV6_ROUTE}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("rtnetlink bind: %w", err)
	}
	return fd, nil
}
