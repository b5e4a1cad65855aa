// Package quicgov is a probe governor for a QUIC server's UDP socket: a
// net.PacketConn wrapper that holds back the server's handshake probes to
// a peer whose round-trip time it knows, instead of queuing them on a slow
// link ahead of the server's answer (docs/results/nbiot/README.md, "Broker
// probe governor"); it also keeps the client's 0-RTT datagrams that arrive
// before their Initial until the Initial comes, within bounds, instead of
// leaving them to quic-go, which keeps them 100 ms (early.go,
// docs/TUNING.md).
//
// This file reads the QUIC packet headers of a datagram (RFC 9000 section
// 17, RFC 9369 for QUIC version 2) without any I/O; governor.go uses it.
package quicgov

import (
	"encoding/binary"
	"errors"
)

// Kinds is the set of QUIC packet types coalesced in one datagram.
type Kinds uint8

// The packet types Parse recognises.
const (
	Initial Kinds = 1 << iota
	ZeroRTT
	Handshake
	Retry
	VersionNegotiation
	// Short is a short-header (1-RTT) packet; it is always the last
	// packet of a datagram.
	Short
)

// Has reports whether k contains every type of t.
func (k Kinds) Has(t Kinds) bool { return k&t == t }

// Long reports whether the datagram's first packet has a long header.
func (k Kinds) Long() bool { return k&^Short != 0 }

// QUIC versions whose long-header packet types Parse knows.
const (
	version1 uint32 = 0x00000001
	version2 uint32 = 0x6b3343cf
)

// Errors of Parse.
var (
	ErrEmpty     = errors.New("quicgov: empty datagram")
	ErrTruncated = errors.New("quicgov: truncated packet")
	ErrVersion   = errors.New("quicgov: unknown QUIC version")
	ErrFixedBit  = errors.New("quicgov: fixed bit not set")
	ErrConnID    = errors.New("quicgov: connection ID longer than 20 bytes")
)

// Parse returns the types of the packets coalesced in datagram d (RFC 9000
// section 12.2): it walks the long-header packets by their Length fields;
// a short-header packet takes the rest of the datagram. Bytes after the
// last packet that do not start a packet (fixed bit clear: padding some
// stacks append) end the walk without error. On error, the types read
// before it are returned with it. Header protection does not cover the
// fields Parse reads.
func Parse(d []byte) (Kinds, error) {
	if len(d) == 0 {
		return 0, ErrEmpty
	}
	var k Kinds
	for first := true; len(d) > 0; first = false {
		b := d[0]
		if b&0x80 == 0 { // short header
			if b&0x40 == 0 {
				if first {
					return k, ErrFixedBit
				}
				return k, nil
			}
			return k | Short, nil
		}
		if len(d) < 7 {
			return k, ErrTruncated
		}
		version := binary.BigEndian.Uint32(d[1:5])
		if version == 0 {
			return k | VersionNegotiation, nil
		}
		if b&0x40 == 0 {
			if first {
				return k, ErrFixedBit
			}
			return k, nil
		}
		t, err := longType(version, b)
		if err != nil {
			return k, err
		}
		rest := d[5:]
		for range 2 { // destination and source connection IDs
			if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
				return k, ErrTruncated
			}
			if rest[0] > 20 {
				return k, ErrConnID
			}
			rest = rest[1+int(rest[0]):]
		}
		if t == Retry {
			return k | Retry, nil
		}
		if t == Initial {
			n, l, ok := varint(rest)
			if !ok || uint64(len(rest)-l) < n {
				return k, ErrTruncated
			}
			rest = rest[l+int(n):]
		}
		n, l, ok := varint(rest)
		if !ok || uint64(len(rest)-l) < n {
			return k, ErrTruncated
		}
		k |= t
		d = rest[l+int(n):]
	}
	return k, nil
}

// longType maps the type bits of a long header's first byte b to a packet
// type of the given version.
func longType(version uint32, b byte) (Kinds, error) {
	bits := b >> 4 & 0x3
	switch version {
	case version1:
		return [4]Kinds{Initial, ZeroRTT, Handshake, Retry}[bits], nil
	case version2:
		return [4]Kinds{Retry, Initial, ZeroRTT, Handshake}[bits], nil
	}
	return 0, ErrVersion
}

// varint reads a QUIC variable-length integer (RFC 9000 section 16):
// its value, its length in bytes, and whether b held all of it.
func varint(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	n = 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0, false
	}
	v = uint64(b[0] & 0x3f)
	for _, c := range b[1:n] {
		v = v<<8 | uint64(c)
	}
	return v, n, true
}

// DestConnID returns the destination connection ID of a long-header
// packet at the start of d (nil for a short header or a malformed one): a
// server's long-header packets to one connection carry the client's
// connection ID, so a new ID to the same address is a new handshake.
func DestConnID(d []byte) []byte {
	if len(d) < 6 || d[0]&0x80 == 0 || int(d[5]) > 20 || len(d) < 6+int(d[5]) {
		return nil
	}
	return d[6 : 6+int(d[5])]
}

// First returns the type of the packet at the start of datagram d: one
// of Initial, ZeroRTT, Handshake, Retry, VersionNegotiation or Short, or 0
// when d is empty, lacks the fixed bit, or is a long header of an unknown
// version or too short to tell. It reads the first byte and the version
// only: a datagram Parse rejects may still have a First.
func First(d []byte) Kinds {
	switch {
	case len(d) == 0:
		return 0
	case d[0]&0x80 == 0:
		if d[0]&0x40 == 0 {
			return 0
		}
		return Short
	case len(d) < 5:
		return 0
	}
	version := binary.BigEndian.Uint32(d[1:5])
	if version == 0 {
		return VersionNegotiation
	}
	if d[0]&0x40 == 0 {
		return 0
	}
	t, err := longType(version, d[0])
	if err != nil {
		return 0
	}
	return t
}
