package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
)

// The record format, one after another in a segment file after its header:
//
//	u32 LE  n      length of body (1 .. maxBody)
//	u32 LE  crc    CRC-32C (Castagnoli) of body
//	body:
//	  u8    kind   kindMessage or kindAck
//	  kindMessage: u64 LE id, i64 LE unix ns, u8 flags (bits 0-1 QoS,
//	               bit 2 retain), uvarint topic length, topic, payload (rest)
//	  kindAck:     u64 LE id (every message up to id has been delivered)
//
// A record is whole only if its length is sane, all n bytes are there and
// the checksum matches; a torn write (power loss, kill -9 in the middle of
// a write) leaves a short or mismatching last record, which the reader
// detects and drops without looking past it.

const (
	// headerSize is the record header: length and checksum.
	headerSize = 8
	// maxBody bounds a record's body, so a corrupt length never makes the
	// reader allocate much: 16 MiB (the broker's payload limit is 256 KiB).
	maxBody = 16 << 20
	// segMagic starts every segment file (format version 1).
	segMagic = "QSPOOL1\n"

	kindMessage = 1
	kindAck     = 2

	flagRetain = 1 << 2

	// maxID bounds message IDs (from 1): a spool never gets near it, so a
	// larger one is corruption, and ID arithmetic never overflows.
	maxID = 1 << 62
)

// castagnoli returns the CRC-32C table (hardware-accelerated on
// amd64/arm64), made on first use: as a package-level table it was built
// (9 KB of heap, a slicing-by-8 table on ARMv6) at the start of every quiot
// process, a publisher without --spool or a broker too.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// errShort means the bytes end inside a record: a torn write at the end of
// a segment (or, when reading a file still being written, more to come).
var errShort = errors.New("record incomplete")

// errCorrupt means a record's length or checksum or body is wrong.
var errCorrupt = errors.New("record corrupt")

// record is one decoded record.
type record struct {
	kind byte
	msg  Message // kindMessage
	ack  uint64  // kindAck
}

// Message is one spooled message.
type Message struct {
	// ID numbers the spool's messages: 1, 2, 3, ... in the order they were
	// appended, never reused, also across restarts.
	ID uint64
	// Time is when the message was appended (accepted), unix nanoseconds;
	// strictly increasing within a spool, so (topic, Time) identifies a
	// message and a duplicate resent after a crash carries the same value.
	Time int64
	// Topic is the topic to publish to.
	Topic string
	// Payload is the message body.
	Payload []byte
	// QoS is 0 or 1.
	QoS byte
	// Retain asks the broker to keep the message as the topic's retained one.
	Retain bool
}

// appendMessage appends m's record to b.
func appendMessage(b []byte, m *Message) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = append(b, kindMessage)
	b = binary.LittleEndian.AppendUint64(b, m.ID)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.Time))
	f := m.QoS & 3
	if m.Retain {
		f |= flagRetain
	}
	b = append(b, f)
	b = binary.AppendUvarint(b, uint64(len(m.Topic)))
	b = append(b, m.Topic...)
	b = append(b, m.Payload...)
	return sealRecord(b, start)
}

// appendAck appends an ack record for id to b.
func appendAck(b []byte, id uint64) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = append(b, kindAck)
	b = binary.LittleEndian.AppendUint64(b, id)
	return sealRecord(b, start)
}

// sealRecord fills in the header of the record that starts at b[start:].
func sealRecord(b []byte, start int) []byte {
	body := b[start+headerSize:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli()))
	return b
}

// recordSize is the encoded size of a message record.
func recordSize(topicLen, payloadLen int) int {
	var v [binary.MaxVarintLen64]byte
	return headerSize + 1 + 8 + 8 + 1 + binary.PutUvarint(v[:], uint64(topicLen)) + topicLen + payloadLen
}

// parseRecord decodes the record at the start of b and returns it with its
// encoded size. It returns errShort when b ends inside the record and
// errCorrupt (wrapped, with the reason) when the record is malformed. The
// returned message's Payload aliases b.
func parseRecord(b []byte) (record, int, error) {
	if len(b) < headerSize {
		return record{}, 0, errShort
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxBody {
		return record{}, 0, fmt.Errorf("%w: length %d", errCorrupt, n)
	}
	if uint64(len(b)-headerSize) < uint64(n) {
		return record{}, 0, errShort
	}
	body := b[headerSize : headerSize+int(n)]
	if crc32.Checksum(body, castagnoli()) != binary.LittleEndian.Uint32(b[4:]) {
		return record{}, 0, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	r, err := parseBody(body)
	if err != nil {
		return record{}, 0, err
	}
	return r, headerSize + int(n), nil
}

// parseBody decodes a checksummed record body.
func parseBody(body []byte) (record, error) {
	switch body[0] {
	case kindAck:
		if len(body) != 9 {
			return record{}, fmt.Errorf("%w: ack of %d bytes", errCorrupt, len(body))
		}
		id := binary.LittleEndian.Uint64(body[1:])
		if id >= maxID {
			return record{}, fmt.Errorf("%w: ack id %d out of range", errCorrupt, id)
		}
		return record{kind: kindAck, ack: id}, nil
	case kindMessage:
		if len(body) < 18 {
			return record{}, fmt.Errorf("%w: message of %d bytes", errCorrupt, len(body))
		}
		m := Message{
			ID:   binary.LittleEndian.Uint64(body[1:]),
			Time: int64(binary.LittleEndian.Uint64(body[9:])),
		}
		if m.ID == 0 || m.ID >= maxID {
			return record{}, fmt.Errorf("%w: message id %d out of range", errCorrupt, m.ID)
		}
		f := body[17]
		if f&^(3|flagRetain) != 0 || f&3 > 1 {
			return record{}, fmt.Errorf("%w: flags %#x", errCorrupt, f)
		}
		m.QoS, m.Retain = f&3, f&flagRetain != 0
		rest := body[18:]
		tl, k := binary.Uvarint(rest)
		if k <= 0 || tl > uint64(len(rest)-k) {
			return record{}, fmt.Errorf("%w: topic length", errCorrupt)
		}
		rest = rest[k:]
		m.Topic = string(rest[:tl])
		m.Payload = rest[tl:]
		return record{kind: kindMessage, msg: m}, nil
	default:
		return record{}, fmt.Errorf("%w: kind %d", errCorrupt, body[0])
	}
}
