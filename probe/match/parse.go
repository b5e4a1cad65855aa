package match

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"net/netip"
)

// UDP is the part of a captured frame the matcher needs.
type UDP struct {
	Src, Dst netip.AddrPort
	Payload  []byte // as captured (may be cut by the snap length)
	Len      int    // UDP payload length from the UDP header
}

// Errors of ParseUDP.
var (
	ErrShort  = errors.New("frame too short")
	ErrNotUDP = errors.New("not an unfragmented UDP packet over IPv4/IPv6")
)

// ParseUDP parses an Ethernet frame (optionally one 802.1Q/802.1ad tag)
// carrying UDP over IPv4 (unfragmented) or IPv6 (no extension headers).
// Payload aliases frame. It never panics.
func ParseUDP(frame []byte) (UDP, error) {
	var u UDP
	if len(frame) < 14 {
		return u, ErrShort
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := 14
	if et == 0x8100 || et == 0x88a8 {
		if len(frame) < 18 {
			return u, ErrShort
		}
		et = binary.BigEndian.Uint16(frame[16:])
		off = 18
	}
	var l4 int
	switch et {
	case 0x0800:
		ip := frame[off:]
		if len(ip) < 20 {
			return u, ErrShort
		}
		ihl := int(ip[0]&0x0f) * 4
		if ip[0]>>4 != 4 || ihl < 20 || ip[9] != 17 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return u, ErrNotUDP
		}
		if len(ip) < ihl+8 {
			return u, ErrShort
		}
		u.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), 0)
		u.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), 0)
		l4 = off + ihl
	case 0x86dd:
		ip := frame[off:]
		if len(ip) < 48 {
			return u, ErrShort
		}
		if ip[0]>>4 != 6 || ip[6] != 17 {
			return u, ErrNotUDP
		}
		u.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), 0)
		u.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), 0)
		l4 = off + 40
	default:
		return u, ErrNotUDP
	}
	h := frame[l4:]
	u.Src = netip.AddrPortFrom(u.Src.Addr(), binary.BigEndian.Uint16(h[0:]))
	u.Dst = netip.AddrPortFrom(u.Dst.Addr(), binary.BigEndian.Uint16(h[2:]))
	u.Len = int(binary.BigEndian.Uint16(h[4:])) - 8
	if u.Len < 0 {
		return u, ErrNotUDP
	}
	p := h[8:]
	if len(p) > u.Len {
		p = p[:u.Len] // Ethernet padding of short frames
	}
	u.Payload = p
	return u, nil
}

// PayloadHash is the passive-mode packet key: FNV-1a 64 over the captured
// payload and the payload's full length.
func PayloadHash(u UDP) uint64 {
	h := fnv.New64a()
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(u.Len))
	h.Write(l[:])
	h.Write(u.Payload)
	return h.Sum64()
}

// FlowHash identifies the 5-tuple (protocol UDP) of u.
func FlowHash(u UDP) uint64 {
	h := fnv.New64a()
	a, _ := u.Src.MarshalBinary()
	h.Write(a)
	b, _ := u.Dst.MarshalBinary()
	h.Write(b)
	return h.Sum64()
}
