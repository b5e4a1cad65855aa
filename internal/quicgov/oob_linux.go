package quicgov

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// oobConn is a Conn over a *net.UDPConn on Linux that quic-go still
// treats as one (an OOBCapablePacketConn with batched reads): GSO, ECN,
// batched reads and the source address of replies are kept. A GSO write
// that carries a long-header datagram is split into single datagrams, so
// each can be held or passed on its own.
type oobConn struct {
	*Conn
	u  *net.UDPConn
	bc *ipv4.PacketConn
}

// oobWrap returns c as an oobConn when pc is a *net.UDPConn.
func oobWrap(c *Conn, pc net.PacketConn) (net.PacketConn, bool) {
	u, ok := pc.(*net.UDPConn)
	if !ok {
		return nil, false
	}
	c.send = func(p, oob []byte, to net.Addr) error {
		if ua, ok := to.(*net.UDPAddr); ok {
			_, _, err := u.WriteMsgUDP(p, oob, ua)
			return err
		}
		_, err := u.WriteTo(p, to)
		return err
	}
	return &oobConn{Conn: c, u: u, bc: ipv4.NewPacketConn(u)}, true
}

// SyscallConn implements syscall.Conn.
func (o *oobConn) SyscallConn() (syscall.RawConn, error) { return o.u.SyscallConn() }

// ReadMsgUDP implements quic-go's OOBCapablePacketConn.
func (o *oobConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	n, oobn, flags, addr, err = o.u.ReadMsgUDP(b, oob)
	if err == nil && n > 0 {
		o.received(b[:n], addr)
	}
	return n, oobn, flags, addr, err
}

// ReadBatch reads several datagrams with one system call (recvmmsg), as
// quic-go does on a *net.UDPConn.
func (o *oobConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	n, err := o.bc.ReadBatch(ms, flags)
	for i := range n {
		if m := ms[i]; m.N > 0 && len(m.Buffers) > 0 && m.Addr != nil {
			o.received(m.Buffers[0][:min(m.N, len(m.Buffers[0]))], m.Addr)
		}
	}
	return n, err
}

// WriteMsgUDP implements quic-go's OOBCapablePacketConn.
func (o *oobConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	seg, rest := splitGSO(oob)
	if seg == 0 || len(b) <= seg {
		if len(b) > 0 && b[0]&0x80 != 0 && o.hold(b, rest, addr) {
			return len(b), len(oob), nil
		}
		return o.u.WriteMsgUDP(b, oob, addr)
	}
	long := false
	for i := 0; i < len(b); i += seg {
		if b[i]&0x80 != 0 {
			long = true
			break
		}
	}
	if !long {
		return o.u.WriteMsgUDP(b, oob, addr)
	}
	for i := 0; i < len(b); i += seg {
		d := b[i:min(i+seg, len(b))]
		if d[0]&0x80 != 0 && o.hold(d, rest, addr) {
			continue
		}
		if _, _, err := o.u.WriteMsgUDP(d, rest, addr); err != nil {
			return 0, 0, err
		}
	}
	return len(b), len(oob), nil
}

// splitGSO returns the segment size of a UDP_SEGMENT control message in
// oob (0: none) and oob without it.
func splitGSO(oob []byte) (seg int, rest []byte) {
	hdr := unix.CmsgLen(0)
	for off := 0; off+unix.SizeofCmsghdr <= len(oob); {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[off]))
		l := int(h.Len)
		if l < hdr || off+l > len(oob) {
			return 0, oob
		}
		next := min(off+unix.CmsgSpace(l-hdr), len(oob))
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_SEGMENT && l-hdr >= 2 {
			seg = int(*(*uint16)(unsafe.Pointer(&oob[off+hdr])))
			rest = append(append(make([]byte, 0, len(oob)), oob[:off]...), oob[next:]...)
			return seg, rest
		}
		off = next
	}
	return 0, oob
}
