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

// ReadMsgUDP implements quic-go's OOBCapablePacketConn. Like
// Conn.ReadFrom, it returns released 0-RTT datagrams first, with the
// control messages they were read with, and skips those it keeps.
func (o *oobConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	for {
		if d, ok := o.nextPending(); ok {
			return copy(b, d.p), copy(oob, d.oob), d.flags, udpAddr(d.addr), nil
		}
		n, oobn, flags, addr, err = o.u.ReadMsgUDP(b, oob)
		if err != nil || n == 0 || !o.admit(b[:n], oob[:oobn], flags, addr) {
			return n, oobn, flags, addr, err
		}
	}
}

// ReadBatch reads several datagrams with one system call (recvmmsg), as
// quic-go does on a *net.UDPConn. Released 0-RTT datagrams are returned
// first (a batch of them alone, with their control messages); datagrams
// Conn keeps are taken out of a batch, the later ones moved up; a batch
// of kept datagrams alone is not returned: ReadBatch reads again.
func (o *oobConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	for {
		k := 0
		for k < len(ms) {
			d, ok := o.nextPending()
			if !ok {
				break
			}
			putMessage(&ms[k], d)
			k++
		}
		if k > 0 {
			return k, nil
		}
		n, err := o.bc.ReadBatch(ms, flags)
		out := 0
		for i := range n {
			m := &ms[i]
			if m.N > 0 && len(m.Buffers) > 0 && m.Addr != nil {
				p := m.Buffers[0][:min(m.N, len(m.Buffers[0]))]
				if o.admit(p, m.OOB[:min(m.NN, len(m.OOB))], m.Flags, m.Addr) {
					continue
				}
			}
			if out != i {
				moveMessage(&ms[out], m)
			}
			out++
		}
		if out > 0 || err != nil || n == 0 {
			return out, err
		}
	}
}

// putMessage puts datagram d into m (quic-go's buffers).
func putMessage(m *ipv4.Message, d inbound) {
	m.N, m.NN, m.Flags, m.Addr = 0, 0, d.flags, d.addr
	if len(m.Buffers) > 0 {
		m.N = copy(m.Buffers[0], d.p)
	}
	m.NN = copy(m.OOB, d.oob)
}

// moveMessage copies the datagram read into src into dst (its buffers
// stay its own: quic-go reads each message from the buffer it gave it).
func moveMessage(dst, src *ipv4.Message) {
	dst.N, dst.NN, dst.Flags, dst.Addr = 0, 0, src.Flags, src.Addr
	if len(dst.Buffers) > 0 && len(src.Buffers) > 0 {
		dst.N = copy(dst.Buffers[0], src.Buffers[0][:min(src.N, len(src.Buffers[0]))])
	}
	dst.NN = copy(dst.OOB, src.OOB[:min(src.NN, len(src.OOB))])
}

// udpAddr returns a as a *net.UDPAddr.
func udpAddr(a net.Addr) *net.UDPAddr {
	if u, ok := a.(*net.UDPAddr); ok {
		return u
	}
	ap, _ := addrPort(a)
	return net.UDPAddrFromAddrPort(ap)
}

// WriteMsgUDP implements quic-go's OOBCapablePacketConn.
func (o *oobConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	seg, rest := splitGSO(oob)
	if seg == 0 || len(b) <= seg {
		if len(b) > 0 && b[0]&0x80 != 0 && o.hold(b, rest, addr) {
			return len(b), len(oob), nil
		}
		if len(b) > 0 && b[0]&0x80 == 0 {
			o.sentShort(b, rest, addr)
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
		if o.copying.Load() > 0 {
			for i := 0; i < len(b); i += seg {
				o.sentShort(b[i:min(i+seg, len(b))], rest, addr)
			}
		}
		return o.u.WriteMsgUDP(b, oob, addr)
	}
	for i := 0; i < len(b); i += seg {
		d := b[i:min(i+seg, len(b))]
		if d[0]&0x80 != 0 && o.hold(d, rest, addr) {
			continue
		}
		if d[0]&0x80 == 0 {
			o.sentShort(d, rest, addr)
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
