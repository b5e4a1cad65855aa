package client

import (
	"hash/crc32"
	"sync"
)

// Deduper drops the duplicates a subscriber may see with QoS 1 (at least
// once): a message the broker delivers again with the same sequence
// number, and a message a publisher sent again (its acknowledgement was
// lost, or it restarted with a spool) that carries the same topic, send
// time and payload. It remembers the last Window messages. Messages
// without a send time or a sequence number, and gap announcements, are
// never taken for duplicates. The zero value is ready to use; it is not
// safe for concurrent use.
type Deduper struct {
	// Window is how many recent messages are remembered. Default 4096.
	Window int

	seen  map[dedupKey]struct{}
	order []dedupKey
	next  int
}

type dedupKey struct {
	topic string
	sent  int64  // publisher's send time, unix ns (0: by sequence)
	seq   uint64 // broker sequence when there is no send time
	sum   uint32 // CRC-32C of the payload
}

// dedupTable returns the CRC-32C table, made on first use (not at the start
// of every quiot process: 9 KB of heap, internal/spool's table is lazy too).
var dedupTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// Duplicate reports whether m repeats a message seen before, and
// remembers m otherwise.
func (d *Deduper) Duplicate(m *Message) bool {
	if m.Gap {
		return false
	}
	k := dedupKey{topic: m.Topic, sum: crc32.Checksum(m.Payload, dedupTable())}
	switch {
	case !m.Sent.IsZero():
		k.sent = m.Sent.UnixNano()
	case m.Seq != 0:
		k.seq = m.Seq
	default:
		return false
	}
	if d.seen == nil {
		if d.Window <= 0 {
			d.Window = 4096
		}
		d.seen = make(map[dedupKey]struct{}, d.Window)
		d.order = make([]dedupKey, d.Window)
	}
	if _, ok := d.seen[k]; ok {
		return true
	}
	if old := d.order[d.next]; old != (dedupKey{}) {
		delete(d.seen, old)
	}
	d.order[d.next] = k
	d.next = (d.next + 1) % len(d.order)
	d.seen[k] = struct{}{}
	return false
}
