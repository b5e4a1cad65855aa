//go:build linux

package gen

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/quiot/quiot/probe/netns"
	"golang.org/x/sys/unix"
)

// flows sends through n connected UDP sockets, one per flow.
type flows struct {
	fds    []int
	locals []netip.AddrPort
	bufs   [][]byte
}

// openFlows opens n connected blocking UDP sockets (distinct source ports) in
// namespace ns.
func openFlows(ns string, dst netip.AddrPort, n, plen int) (*flows, error) {
	f := &flows{}
	for i := 0; i < maxBatch; i++ {
		f.bufs = append(f.bufs, make([]byte, plen))
	}
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

func (f *flows) payload(i int) []byte      { return f.bufs[i] }
func (f *flows) sources() []netip.AddrPort { return f.locals }

func (f *flows) send(flows []uint32) (int, error) {
	var first error
	n := 0
	for i, flow := range flows {
		for {
			_, err := unix.Write(f.fds[flow], f.bufs[i])
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil && first == nil {
				first = err
			}
			if err == nil {
				n++
			}
			break
		}
	}
	return n, first
}

func (f *flows) close() {
	for _, fd := range f.fds {
		unix.Close(fd)
	}
	f.fds = nil
}

// injector sends complete Ethernet/IPv4/UDP frames with an AF_PACKET socket
// (qdisc bypassed), many per sendmmsg call.
type injector struct {
	fd       int
	hdrs     [][]byte // per flow: Ethernet+IPv4+UDP headers (42 bytes)
	frames   [][]byte // per batch slot
	msgs     []unix.Mmsghdr
	iovs     []unix.Iovec
	srcs     []netip.AddrPort
	payload0 int
}

const srcPortBase = 40000

func openInjector(o Options, plen int) (*injector, error) {
	if !o.Dst.Addr().Unmap().Is4() {
		return nil, fmt.Errorf("generator: frame injection on %s supports IPv4 destinations only", o.Interface)
	}
	if o.Flows > 65535-srcPortBase {
		return nil, fmt.Errorf("generator: frame injection supports at most %d flows", 65535-srcPortBase)
	}
	in := &injector{fd: -1}
	var srcMAC, dstMAC net.HardwareAddr
	var src netip.Addr
	dst := o.Dst.Addr().Unmap()
	err := netns.Do(o.Namespace, func() error {
		ifi, err := net.InterfaceByName(o.Interface)
		if err != nil {
			return fmt.Errorf("generator: interface %q: %w", o.Interface, err)
		}
		srcMAC = ifi.HardwareAddr
		addrs, err := ifi.Addrs()
		if err != nil {
			return fmt.Errorf("generator: addresses of %q: %w", o.Interface, err)
		}
		for _, a := range addrs {
			if pn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(pn.IP); ok && ip.Unmap().Is4() {
					src = ip.Unmap()
					break
				}
			}
		}
		if !src.IsValid() {
			return fmt.Errorf("generator: interface %q has no IPv4 address", o.Interface)
		}
		dstMAC = o.DstMAC
		if dstMAC == nil {
			arp, err := os.ReadFile("/proc/thread-self/net/arp")
			if err != nil {
				return fmt.Errorf("generator: neighbour table: %w", err)
			}
			if dstMAC = lookupARP(arp, dst, o.Interface); dstMAC == nil {
				return fmt.Errorf("generator: no neighbour entry for %s on %q (ping it first or set DstMAC)", dst, o.Interface)
			}
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("generator: AF_PACKET socket on %q: %w (needs root or CAP_NET_RAW)", o.Interface, err)
		}
		in.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index}); err != nil {
			return fmt.Errorf("generator: bind to %q: %w", o.Interface, err)
		}
		return nil
	})
	if err != nil {
		in.close()
		return nil, err
	}
	for f := 0; f < o.Flows; f++ {
		sp := netip.AddrPortFrom(src, uint16(srcPortBase+f))
		in.srcs = append(in.srcs, sp)
		in.hdrs = append(in.hdrs, frameHeader(srcMAC, dstMAC, sp, netip.AddrPortFrom(dst, o.Dst.Port()), plen))
	}
	in.frames = make([][]byte, maxBatch)
	in.msgs = make([]unix.Mmsghdr, maxBatch)
	in.iovs = make([]unix.Iovec, maxBatch)
	for i := range in.frames {
		fr := make([]byte, EthernetHeader+IPv4Header+UDPHeader+plen)
		in.frames[i] = fr
		in.iovs[i].Base = &fr[0]
		in.iovs[i].SetLen(len(fr))
		in.msgs[i].Hdr.Iov = &in.iovs[i]
		in.msgs[i].Hdr.SetIovlen(1)
	}
	in.payload0 = EthernetHeader + IPv4Header + UDPHeader
	return in, nil
}

// lookupARP finds ip's MAC on dev in /proc/net/arp content.
func lookupARP(table []byte, ip netip.Addr, dev string) net.HardwareAddr {
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != ip.String() || f[5] != dev || f[2] == "0x0" {
			continue
		}
		if mac, err := net.ParseMAC(f[3]); err == nil && !bytes.Equal(mac, make([]byte, len(mac))) {
			return mac
		}
	}
	return nil
}

// frameHeader builds Ethernet + IPv4 (DF, TTL 64, checksum) + UDP (checksum
// 0: none, allowed over IPv4) headers for a payload of plen bytes.
func frameHeader(srcMAC, dstMAC net.HardwareAddr, src, dst netip.AddrPort, plen int) []byte {
	h := make([]byte, EthernetHeader+IPv4Header+UDPHeader)
	copy(h[0:6], dstMAC)
	copy(h[6:12], srcMAC)
	binary.BigEndian.PutUint16(h[12:], 0x0800)
	ip := h[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(IPv4Header+UDPHeader+plen))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for j := 0; j < IPv4Header; j += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[j:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	u := h[34:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(UDPHeader+plen))
	return h
}

func (in *injector) payload(i int) []byte      { return in.frames[i][in.payload0:] }
func (in *injector) sources() []netip.AddrPort { return in.srcs }

func (in *injector) send(flows []uint32) (int, error) {
	for i, f := range flows {
		copy(in.frames[i], in.hdrs[f])
	}
	sent := 0
	for sent < len(flows) {
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(in.fd), uintptr(unsafe.Pointer(&in.msgs[sent])),
			uintptr(len(flows)-sent), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return sent, errno
		}
		if n == 0 {
			return sent, unix.ENOBUFS
		}
		sent += int(n)
	}
	return sent, nil
}

func (in *injector) close() {
	if in.fd >= 0 {
		unix.Close(in.fd)
		in.fd = -1
	}
}

// tuneThread sets the calling (locked) thread's timer slack to 1 ns, so
// that preciseSleep wakes close to its deadline, and with rt its scheduling
// policy to SCHED_FIFO priority 10.
func tuneThread(rt bool) error {
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	if rt {
		attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: 10}
		if err := unix.SchedSetAttr(0, attr, 0); err != nil {
			return fmt.Errorf("SCHED_FIFO: %w", err)
		}
	}
	return nil
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
