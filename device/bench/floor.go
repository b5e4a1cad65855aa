package bench

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The floor of a link profile: the shortest time to first delivery the
// link model allows for the datagrams a handshake actually puts on it.
// Only serialization at the link's rates and the one-way delays count
// (no jitter, no loss, no processing), and the datagrams' sizes are those
// a wake-up sent and received (QUIC pads every datagram with an
// ack-eliciting Initial to 1200 bytes, RFC 9000 §14.1), plus the IP and
// UDP headers the link emulator counts (LinkInfo.OverheadBytes).
//
//   - Warm (resumed, 0-RTT): the client's first datagram up + one-way
//     delay + the broker's first datagram down + one-way delay: the
//     response can ride in the broker's first flight, and nothing of the
//     client's can be read before that flight's ServerHello.
//   - Cold (first connection): the client's first datagram up, the
//     broker's whole first flight down (its Initial and Handshake
//     datagrams received before the client finished: the certificate
//     chain as sent), the client's Handshake finish and request up (its
//     first datagram with a 1-RTT packet and its other 1-RTT datagrams
//     before the next one received), the response down (the last datagram received before the
//     acknowledgement reached the application): two round trips plus the
//     serialization of those bytes.

// Dir is a datagram's direction on the device's socket.
type Dir string

// The two directions: Up is device -> broker.
const (
	Up   Dir = "up"
	Down Dir = "down"
)

// PacketType is a QUIC packet's type, from its first byte.
type PacketType string

// QUIC v1 packet types (RFC 9000 §17).
const (
	PktInitial   PacketType = "initial"
	Pkt0RTT      PacketType = "0rtt"
	PktHandshake PacketType = "handshake"
	PktRetry     PacketType = "retry"
	Pkt1RTT      PacketType = "1rtt"
	PktUnknown   PacketType = "unknown"
)

// Datagram is one datagram on the device's socket.
type Datagram struct {
	// Dir is its direction.
	Dir Dir `json:"dir"`
	// Size is the UDP payload in bytes.
	Size int `json:"size"`
	// AtMs is when the device's socket sent or received it, from the
	// application's publish call.
	AtMs float64 `json:"at_ms"`
	// Packets are the QUIC packets coalesced in it, in order.
	Packets []PacketType `json:"packets"`
}

// has reports whether the datagram holds a packet of type t.
func (d Datagram) has(t PacketType) bool {
	for _, p := range d.Packets {
		if p == t {
			return true
		}
	}
	return false
}

// ClassifyPackets returns the types of the QUIC packets coalesced in a
// datagram: long headers (first bit set) by their type bits, with their
// Length field to find the next packet; a short header (1-RTT) runs to
// the datagram's end. A malformed rest is PktUnknown.
func ClassifyPackets(b []byte) []PacketType {
	var out []PacketType
	for len(b) > 0 {
		first := b[0]
		if first&0x80 == 0 {
			return append(out, Pkt1RTT)
		}
		if len(b) < 7 {
			return append(out, PktUnknown)
		}
		if binary.BigEndian.Uint32(b[1:5]) != 1 { // QUIC v1 only (v2 permutes the types)
			return append(out, PktUnknown)
		}
		var t PacketType
		switch (first >> 4) & 0x3 {
		case 0:
			t = PktInitial
		case 1:
			t = Pkt0RTT
		case 2:
			t = PktHandshake
		default:
			return append(out, PktRetry)
		}
		i := 5
		for range 2 { // destination and source connection IDs
			if i >= len(b) {
				return append(out, PktUnknown)
			}
			i += 1 + int(b[i])
		}
		if t == PktInitial {
			n, l := varint(b[min(i, len(b)):])
			if l == 0 {
				return append(out, PktUnknown)
			}
			i += l + int(n)
		}
		if i > len(b) {
			return append(out, PktUnknown)
		}
		n, l := varint(b[i:])
		if l == 0 || uint64(len(b)-i-l) < n {
			return append(out, PktUnknown)
		}
		out = append(out, t)
		b = b[i+l+int(n):]
	}
	return out
}

// varint decodes a QUIC variable-length integer; l is 0 when b is short.
func varint(b []byte) (v uint64, l int) {
	if len(b) == 0 {
		return 0, 0
	}
	l = 1 << (b[0] >> 6)
	if len(b) < l {
		return 0, 0
	}
	v = uint64(b[0] & 0x3f)
	for _, c := range b[1:l] {
		v = v<<8 | uint64(c)
	}
	return v, l
}

// Leg is one step of a floor: datagrams serialized in one direction, then
// the one-way delay.
type Leg struct {
	// What names the step ("client Initial").
	What string `json:"what"`
	// Dir is the direction.
	Dir Dir `json:"dir"`
	// Datagrams and Bytes are what crossed the link (Bytes: UDP payload).
	Datagrams int `json:"datagrams"`
	Bytes     int `json:"bytes"`
	// SerializeMs is the airtime at the direction's rate, headers
	// included; DelayMs the one-way delay.
	SerializeMs float64 `json:"serialize_ms"`
	DelayMs     float64 `json:"delay_ms"`
}

// Floor is a floor and how it is made up.
type Floor struct {
	// Ms is the sum of the legs.
	Ms float64 `json:"ms"`
	// Legs are its steps in order.
	Legs []Leg `json:"legs"`
}

// String writes the floor's sum, e.g. "1228 B up 491 + 300 + ...".
func (f Floor) String() string {
	var parts []string
	for _, l := range f.Legs {
		parts = append(parts, fmt.Sprintf("%s %d B (%d dgram) %s %.0f + %.0f", l.What, l.Bytes, l.Datagrams, l.Dir, l.SerializeMs, l.DelayMs))
	}
	return fmt.Sprintf("%.0f ms = %s", f.Ms, strings.Join(parts, " + "))
}

// leg builds a leg over ds in direction dir on link.
func leg(link LinkInfo, what string, dir Dir, ds []Datagram) Leg {
	l := Leg{What: what, Dir: dir, Datagrams: len(ds), DelayMs: link.DelayMs}
	rate := link.RateKbps
	if dir == Down && link.RateDownKbps > 0 {
		rate = link.RateDownKbps
	}
	onLink := 0
	for _, d := range ds {
		l.Bytes += d.Size
		onLink += d.Size + link.OverheadBytes
	}
	if rate > 0 {
		l.SerializeMs = float64(onLink) * 8 / rate
	}
	return l
}

func floorOf(legs ...Leg) Floor {
	f := Floor{Legs: legs}
	for _, l := range legs {
		f.Ms += l.SerializeMs + l.DelayMs
	}
	return f
}

// WarmFloor is the floor of a resumed wake-up from its datagrams: the
// client's first datagram up and the broker's first datagram down. ok is
// false when the sequence lacks either.
func WarmFloor(seq []Datagram, link LinkInfo) (f Floor, ok bool) {
	up, down := -1, -1
	for i, d := range seq {
		if d.Dir == Up && up < 0 {
			up = i
		}
		if d.Dir == Down && down < 0 {
			down = i
		}
	}
	if up < 0 || down < 0 {
		return Floor{}, false
	}
	return floorOf(leg(link, "client's first datagram", Up, seq[up:up+1]),
		leg(link, "broker's first datagram", Down, seq[down:down+1])), true
}

// ColdFloor is the floor of a first connection from its datagrams; respAt
// is when the acknowledgement reached the application (ms from the publish
// call). ok is false when the sequence lacks a step.
func ColdFloor(seq []Datagram, respAtMs float64, link LinkInfo) (f Floor, ok bool) {
	first := -1
	for i, d := range seq {
		if d.Dir == Up {
			first = i
			break
		}
	}
	fin := -1 // the client's first datagram with a 1-RTT packet
	for i, d := range seq {
		if d.Dir == Up && d.has(Pkt1RTT) {
			fin = i
			break
		}
	}
	if first < 0 || fin < 0 {
		return Floor{}, false
	}
	var flight []Datagram
	for _, d := range seq[:fin] {
		if d.Dir == Down && (d.has(PktInitial) || d.has(PktHandshake)) {
			flight = append(flight, d)
		}
	}
	// The finish and the request: the first 1-RTT datagram and the
	// client's other 1-RTT datagrams up to the next one received (its
	// Handshake-only probes and ACKs in between are not the request).
	req := seq[fin : fin+1 : fin+1]
	end := fin + 1
	for ; end < len(seq) && seq[end].Dir == Up; end++ {
		if seq[end].has(Pkt1RTT) {
			req = append(req, seq[end])
		}
	}
	resp := -1
	for i := end; i < len(seq) && seq[i].AtMs <= respAtMs; i++ {
		if seq[i].Dir == Down {
			resp = i
		}
	}
	if len(flight) == 0 || resp < 0 {
		return Floor{}, false
	}
	return floorOf(leg(link, "client Initial", Up, seq[first:first+1]),
		leg(link, "broker's first flight", Down, flight),
		leg(link, "client's finish + request", Up, req),
		leg(link, "response", Down, seq[resp:resp+1])), true
}

// lowerMedian returns the floor whose Ms is the lower median of fs (an
// element, so its legs stay whole); ok false when fs is empty.
func lowerMedian(fs []Floor) (Floor, bool) {
	if len(fs) == 0 {
		return Floor{}, false
	}
	s := append([]Floor(nil), fs...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Ms < s[j].Ms })
	return s[(len(s)-1)/2], true
}

// msSince is d's offset from t0 in milliseconds.
func msSince(t0, t time.Time) float64 { return float64(t.Sub(t0)) / float64(time.Millisecond) }
