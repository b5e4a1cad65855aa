package gen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Magic marks a probe payload: "OVSPRB" followed by format version 0x0001.
var Magic = [8]byte{'O', 'V', 'S', 'P', 'R', 'B', 0, 1}

const (
	// MinHeaderLen is the shortest probe payload: magic, sequence, flow id.
	MinHeaderLen = 8 + 8 + 4
	// HeaderLen is the full header, with the send timestamp. Payloads shorter
	// than HeaderLen (the smallest frames) carry no send time.
	HeaderLen = MinHeaderLen + 8
	// EthernetHeader, IPv4Header, IPv6Header and UDPHeader are the header
	// sizes the frame size is counted with.
	EthernetHeader = 14
	IPv4Header     = 20
	IPv6Header     = 40
	UDPHeader      = 8
	// MaxFrame is the largest frame: a 1500-byte IP packet plus Ethernet.
	MaxFrame = 1514
)

// Header is the probe header at the start of each UDP payload (big endian):
//
//	0  magic   [8]byte  Magic
//	8  seq     uint64   global sequence number, from 0, one per packet sent
//	16 flow    uint32   flow index 0..Flows-1
//	20 sent    int64    send time, Unix nanoseconds (only if payload >= 28 bytes)
//	28 padding zeros up to the frame size
type Header struct {
	Seq  uint64
	Flow uint32
	Sent time.Time // zero when the payload had no room for it
}

// ErrNotProbe is returned by Decode for payloads that are not probe packets.
var ErrNotProbe = errors.New("not a probe payload")

// Encode writes h at the start of p; p must be at least MinHeaderLen long.
// The send time is written when p has room (len(p) >= HeaderLen). The rest
// of p is left as it is (zero it once for padding).
func Encode(p []byte, h Header) error {
	if len(p) < MinHeaderLen {
		return fmt.Errorf("probe payload of %d bytes, need at least %d", len(p), MinHeaderLen)
	}
	copy(p, Magic[:])
	binary.BigEndian.PutUint64(p[8:], h.Seq)
	binary.BigEndian.PutUint32(p[16:], h.Flow)
	if len(p) >= HeaderLen {
		var ns int64
		if !h.Sent.IsZero() {
			ns = h.Sent.UnixNano()
		}
		binary.BigEndian.PutUint64(p[20:], uint64(ns))
	}
	return nil
}

// Decode reads the header at the start of a UDP payload. It never panics; a
// payload without the magic gives ErrNotProbe.
func Decode(p []byte) (Header, error) {
	if len(p) < MinHeaderLen || [8]byte(p[:8]) != Magic {
		return Header{}, ErrNotProbe
	}
	h := Header{Seq: binary.BigEndian.Uint64(p[8:]), Flow: binary.BigEndian.Uint32(p[16:])}
	if len(p) >= HeaderLen {
		if ns := int64(binary.BigEndian.Uint64(p[20:])); ns != 0 {
			h.Sent = time.Unix(0, ns)
		}
	}
	return h, nil
}

// PayloadLen returns the UDP payload length that makes an Ethernet frame of
// frameSize bytes (without FCS) to dst, or an error when the frame cannot hold
// the probe header or exceeds MaxFrame.
func PayloadLen(frameSize int, dst netip.Addr) (int, error) {
	ip := IPv4Header
	if dst.Is6() && !dst.Is4In6() {
		ip = IPv6Header
	}
	n := frameSize - EthernetHeader - ip - UDPHeader
	if n < MinHeaderLen || frameSize > MaxFrame {
		return 0, fmt.Errorf("frame size %d out of range %d..%d for %s",
			frameSize, MinHeaderLen+EthernetHeader+ip+UDPHeader, MaxFrame, map[bool]string{true: "IPv6", false: "IPv4"}[ip == IPv6Header])
	}
	return n, nil
}
