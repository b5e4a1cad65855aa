package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/quiot/quiot/broker/space"
)

// recordVersion is the first byte of every encoded message.
const recordVersion = 1

// encodeMessage appends m's record (everything but its sequence number,
// which is the key) to dst:
//
//	version(1) flags(1: qos | retain<<2) time(varint) topic origin identity
//	(each uvarint length + bytes) payload(rest)
func encodeMessage(dst []byte, m *space.Message) []byte {
	flags := m.QoS & 3
	if m.Retain {
		flags |= 4
	}
	dst = append(dst, recordVersion, flags)
	dst = binary.AppendVarint(dst, m.Time)
	for _, s := range []string{m.Topic, m.Origin, m.Identity} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return append(dst, m.Payload...)
}

// errBadRecord is wrapped by decodeMessage's errors.
var errBadRecord = errors.New("bad message record")

// decodeMessage parses a record made by encodeMessage. The message's strings
// and payload are copies (bbolt's memory is valid only in its transaction).
func decodeMessage(seq uint64, b []byte) (*space.Message, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes", errBadRecord, len(b))
	}
	if b[0] != recordVersion {
		return nil, fmt.Errorf("%w: version %d", errBadRecord, b[0])
	}
	if b[1]&^7 != 0 || b[1]&3 > 2 {
		return nil, fmt.Errorf("%w: flags %#x", errBadRecord, b[1])
	}
	m := &space.Message{Seq: seq, QoS: b[1] & 3, Retain: b[1]&4 != 0}
	b = b[2:]
	t, n := binary.Varint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: time", errBadRecord)
	}
	m.Time = t
	b = b[n:]
	var strs [3]string
	for i := range strs {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: string %d", errBadRecord, i)
		}
		strs[i] = string(b[n : n+int(l)])
		b = b[n+int(l):]
	}
	m.Topic, m.Origin, m.Identity = strs[0], strs[1], strs[2]
	m.Payload = append([]byte(nil), b...)
	return m, nil
}

// u64 encodes a big-endian uint64 (keys sort by number).
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// getU64 decodes a big-endian uint64; ok is false unless b has 8 bytes.
func getU64(b []byte) (uint64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}
