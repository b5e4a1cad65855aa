package spool

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
)

// reader is the delivery position: an open segment and an offset in it,
// with a window of bytes read ahead.
type reader struct {
	seg *segment
	f   *os.File
	off int64  // file offset of buf[0]
	buf []byte // bytes read from off
}

func (r *reader) close() {
	if r.f != nil {
		r.f.Close()
	}
	*r = reader{}
}

// readChunk is how much the reader reads at once.
const readChunk = 64 << 10

// Next returns the oldest message not yet handed out, in ID order, waiting
// until one is appended or ctx is done. Each message is handed out once
// per Open; the caller acknowledges it with Ack once delivered (messages
// handed out but never acknowledged come again after the next Open).
// Messages older than MaxAge are skipped and counted as expired.
func (s *Spool) Next(ctx context.Context) (Message, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return Message{}, ErrClosed
		}
		m, ok, err := s.nextLocked()
		ch := s.changed
		s.mu.Unlock()
		if err != nil || ok {
			return m, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
	}
}

// nextLocked finds the next message after readID in the readable part of
// the log. ok is false when there is none yet.
func (s *Spool) nextLocked() (Message, bool, error) {
	for {
		want := max(s.readID, s.cursor, s.floor) + 1
		if want >= s.nextID {
			return Message{}, false, nil
		}
		// The segment holding want: the last one whose name is <= want.
		i := len(s.segs) - 1
		for i > 0 && s.segs[i].name > want {
			i--
		}
		sg := s.segs[i]
		if s.rd.seg != sg {
			s.rd.close()
			f, err := os.Open(sg.path)
			if err != nil {
				return Message{}, false, fmt.Errorf("couldn't open segment: %w", err)
			}
			s.rd = reader{seg: sg, f: f, off: int64(len(segMagic))}
		}
		m, ok, err := s.readLocked(want)
		if err != nil || ok {
			return m, ok, err
		}
		// Nothing more in this segment: on to the next, if there is one.
		if i == len(s.segs)-1 {
			return Message{}, false, nil
		}
		s.readID = max(s.readID, sg.last, s.segs[i+1].name-1)
	}
}

// readLocked reads records of the reader's segment until a message with
// ID >= want; it skips acks, delivered messages and expired ones.
func (s *Spool) readLocked(want uint64) (Message, bool, error) {
	r := &s.rd
	limit := r.seg.size
	for {
		// Jump over corrupt regions found at Open.
		pos := r.off
		for _, b := range r.seg.bad {
			if pos >= b[0] && pos < b[1] {
				r.buf, r.off = nil, b[1]
				pos = b[1]
			}
		}
		if r.off >= limit {
			return Message{}, false, nil
		}
		rec, n, err := parseRecord(r.buf)
		if err == errShort {
			have := r.off + int64(len(r.buf))
			if have >= limit {
				return Message{}, false, fmt.Errorf("segment %s: record at %d runs past the end", r.seg.path, r.off)
			}
			need := readChunk
			if len(r.buf) >= headerSize {
				need = max(need, int(uint32le(r.buf))+headerSize-len(r.buf))
			}
			need = int(min(int64(need), limit-have))
			r.buf = slices.Grow(r.buf, need)
			k, err := r.f.ReadAt(r.buf[len(r.buf):len(r.buf)+need], have)
			if k == 0 && err != nil && err != io.EOF {
				return Message{}, false, fmt.Errorf("couldn't read segment: %w", err)
			}
			r.buf = r.buf[:len(r.buf)+k]
			if k == 0 {
				return Message{}, false, fmt.Errorf("segment %s: short read at %d", r.seg.path, have)
			}
			continue
		}
		if err != nil {
			return Message{}, false, fmt.Errorf("segment %s at %d: %w", r.seg.path, r.off, err)
		}
		r.buf = r.buf[n:]
		r.off += int64(n)
		if len(r.buf) == 0 {
			r.buf = r.buf[:0:0] // let a large window go
		}
		if rec.kind != kindMessage || rec.msg.ID < want {
			continue
		}
		m := rec.msg
		m.Payload = slices.Clone(m.Payload)
		s.readID = m.ID
		if s.o.MaxAge > 0 && m.Time < s.o.Now().Add(-s.o.MaxAge).UnixNano() {
			if m.ID > max(s.cursor, s.floor) {
				s.st.Expired++
				s.floor = max(s.floor, m.ID)
				s.log.Warn("spool: skipped a message older than max age", "id", m.ID, "topic", m.Topic, "max_age", s.o.MaxAge)
				s.broadcast()
			}
			continue
		}
		return m, true, nil
	}
}

func uint32le(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
