// Package spool is the device's store-and-forward queue: an append-only,
// segmented on-disk log of accepted messages that a publisher delivers in
// order once the broker is reachable, surviving kill -9 and power loss.
//
// Made for SD cards: records are only ever appended (old data is never
// rewritten), concurrent appends share one write(2) and one fsync (group
// commit), the fsync policy is the caller's choice (every batch, every N
// ms, never), and whole segment files are deleted once delivered. Each
// record carries its length and a CRC-32C, so a torn last record is found
// and cut off at Open and never spoils the records before or after it.
// Delivery progress (the ack cursor) is appended to the log as small ack
// records: after a restart only messages delivered since the last ack
// record reached the file are sent again (at least once), and each carries
// its original ID and time, so a duplicate is recognisable.
//
// The spool is bounded in bytes and in age: when full, the oldest segment
// goes; messages older than MaxAge are skipped; both are counted and
// logged.
package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fsync is when the spool forces appended records to stable storage.
type Fsync int

const (
	// FsyncInterval syncs every Options.FsyncInterval when something was
	// written (the default): a power cut loses at most that much; kill -9
	// loses nothing (the data is in the page cache).
	FsyncInterval Fsync = iota
	// FsyncAlways syncs each group commit before Append returns: nothing
	// acknowledged is lost, at one fsync per batch.
	FsyncAlways
	// FsyncNever leaves writeback to the kernel (about 5-30 s on Linux).
	FsyncNever
)

// String returns the policy's name.
func (f Fsync) String() string {
	switch f {
	case FsyncAlways:
		return "always"
	case FsyncNever:
		return "never"
	default:
		return "interval"
	}
}

// ParseFsync parses a policy: "always", "never", "interval" (every
// default interval, returned as 0) or a duration such as "200ms" (every
// 200 ms).
func ParseFsync(s string) (Fsync, time.Duration, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "always":
		return FsyncAlways, 0, nil
	case "never":
		return FsyncNever, 0, nil
	case "interval", "":
		return FsyncInterval, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, 0, fmt.Errorf("fsync policy %q: want always, never, interval or a positive duration such as 200ms", s)
	}
	return FsyncInterval, d, nil
}

// Options configure a spool. Only Dir is required.
type Options struct {
	// Dir is the spool directory; created (mode 0700) if missing. One
	// process at a time may open it.
	Dir string
	// MaxBytes bounds the size of the spool's files. When an append would
	// pass it, the oldest segment is deleted and its undelivered messages
	// are counted as dropped and logged. Acknowledgements never drop
	// messages: their small records may pass it until the next append or
	// the deletion of a delivered segment. Default 64 MiB.
	MaxBytes int64
	// MaxAge drops undelivered messages older than this (counted and
	// logged). Default 7 days; negative means no age limit.
	MaxAge time.Duration
	// SegmentBytes is the size at which the log moves on to a new segment
	// file. Default min(4 MiB, MaxBytes/8), at least 4 KiB; at most
	// MaxBytes/2.
	SegmentBytes int64
	// Fsync is the sync policy. Default FsyncInterval.
	Fsync Fsync
	// FsyncInterval is the period of FsyncInterval. Default 1 s.
	FsyncInterval time.Duration
	// Logger receives warnings (drops, torn records) and debug messages.
	// Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultMaxBytes      = 64 << 20
	DefaultMaxAge        = 7 * 24 * time.Hour
	DefaultFsyncInterval = time.Second
	maxSegmentBytes      = 4 << 20
	minSegmentBytes      = 4 << 10
)

// withDefaults applies the documented defaults.
func (o Options) withDefaults() Options {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = min(maxSegmentBytes, o.MaxBytes/8)
	}
	o.SegmentBytes = max(o.SegmentBytes, minSegmentBytes)
	o.SegmentBytes = min(o.SegmentBytes, max(o.MaxBytes/2, 1))
	if o.FsyncInterval == 0 {
		o.FsyncInterval = DefaultFsyncInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Errors.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("spool closed")
	// ErrLocked is returned by Open when another process has the spool.
	ErrLocked = errors.New("spool directory is in use by another process")
	// ErrTooLarge is returned by Append for a message that cannot fit.
	ErrTooLarge = errors.New("message too large for the spool")
)

// Stats are the spool's counters; "since Open" unless said otherwise.
type Stats struct {
	// Appended counts messages appended.
	Appended uint64
	// Acked counts messages acknowledged as delivered.
	Acked uint64
	// Pending is the number of undelivered messages in the spool now.
	Pending uint64
	// Recovered is the number of undelivered messages found at Open.
	Recovered uint64
	// Dropped counts undelivered messages deleted because the spool was
	// full; Expired those skipped for being older than MaxAge.
	Dropped, Expired uint64
	// Corrupt counts corrupt regions skipped at Open; TornBytes is the
	// number of bytes cut off torn segment tails at Open.
	Corrupt   uint64
	TornBytes int64
	// Bytes is the size of the spool's segment files now; Segments their
	// number.
	Bytes    int64
	Segments int
	// Writes and BytesWritten count write(2) calls and their bytes;
	// Fsyncs counts fsync(2) calls (files and directory).
	Writes, BytesWritten, Fsyncs uint64
}

// segment is one log file, named by the first message ID it may hold.
type segment struct {
	name   uint64 // the next message ID when the file was created
	path   string
	size   int64      // bytes written (and, for the reader, readable)
	first  uint64     // first message ID in it (0: none)
	last   uint64     // last message ID in it (0: none)
	newest int64      // time of its last message
	bad    [][2]int64 // corrupt byte ranges skipped at Open
}

// appendReq is one Append waiting for its group commit.
type appendReq struct {
	m    Message
	done chan error
}

// Spool is an open spool. Its methods are safe for concurrent use.
type Spool struct {
	o    Options
	log  *slog.Logger
	lock *os.File
	dir  *os.File

	mu       sync.Mutex
	segs     []*segment // oldest first; the last is the active one
	active   *os.File
	nextID   uint64
	lastTime int64
	cursor   uint64 // every message up to cursor is delivered
	floor    uint64 // every message up to floor has left the spool (dropped, expired)
	ackDisk  uint64 // the cursor of the last ack record written
	readID   uint64 // the last message ID Next handed out
	rd       reader
	queue    []*appendReq
	dirty    bool          // written since the last fsync
	changed  chan struct{} // closed and replaced on every change
	closed   bool
	werr     error // a write failure: the spool refuses appends from then on
	st       Stats

	work chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
	buf  []byte
}

// segPrefix and segSuffix frame segment file names: seg-<20 digits>.log.
const (
	segPrefix = "seg-"
	segSuffix = ".log"
	lockName  = "LOCK"
)

func segName(id uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, id, segSuffix) }

// Open opens (creating if needed) the spool in o.Dir, checks every
// segment, cuts off a torn tail and recovers the ack cursor.
func Open(o Options) (*Spool, error) {
	if o.Dir == "" {
		return nil, errors.New("spool: no directory")
	}
	if o.MaxBytes < 0 || o.SegmentBytes < 0 || o.FsyncInterval < 0 {
		return nil, errors.New("spool: negative size or interval")
	}
	if o.Fsync < FsyncInterval || o.Fsync > FsyncNever {
		return nil, fmt.Errorf("spool: unknown fsync policy %d", o.Fsync)
	}
	o = o.withDefaults()
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("couldn't create spool directory: %w", err)
	}
	lock, err := lockDir(filepath.Join(o.Dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", o.Dir, err)
	}
	s := &Spool{
		o: o, log: o.Logger, lock: lock,
		changed: make(chan struct{}),
		work:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	if err := s.load(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("spool %s: %w", o.Dir, err)
	}
	if d, err := os.Open(o.Dir); err == nil {
		s.dir = d
	}
	s.st.Recovered = s.pendingLocked()
	if s.st.Recovered > 0 {
		s.log.Info("spool has undelivered messages", "dir", o.Dir, "messages", s.st.Recovered, "from_id", max(s.cursor, s.floor)+1)
	}
	s.wg.Add(1)
	go s.writer()
	return s, nil
}

// load scans the directory's segments and opens the active one.
func (s *Spool) load() error {
	ents, err := os.ReadDir(s.o.Dir)
	if err != nil {
		return fmt.Errorf("couldn't read directory: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, segPrefix) || !strings.HasSuffix(n, segSuffix) {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(n, segPrefix), segSuffix), 10, 64)
		if err != nil {
			return fmt.Errorf("foreign file %s in the spool directory", n)
		}
		s.segs = append(s.segs, &segment{name: id, path: filepath.Join(s.o.Dir, n)})
	}
	slices.SortFunc(s.segs, func(a, b *segment) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	var lastID uint64
	keep := s.segs[:0]
	for i, sg := range s.segs {
		isLast := i == len(s.segs)-1
		ok, err := s.scan(sg, isLast, &lastID)
		if err != nil {
			return err
		}
		if ok {
			keep = append(keep, sg)
		}
	}
	s.segs = keep
	for _, sg := range s.segs {
		// A segment is named by the next ID when it was made: no ID below
		// its name may be given again, even if its messages are gone.
		if sg.name > 0 {
			lastID = max(lastID, sg.name-1)
		}
	}
	s.nextID = max(lastID, s.cursor) + 1
	switch {
	case len(s.segs) == 0:
		s.floor = lastID
	case s.segs[0].first > 0:
		s.floor = s.segs[0].first - 1
	case len(s.segs) == 1:
		s.floor = lastID // one segment without messages
	case s.segs[0].name > 0:
		s.floor = s.segs[0].name - 1
	}
	s.ackDisk = s.cursor
	s.readID = max(s.cursor, s.floor)
	if len(s.segs) == 0 {
		return s.newSegment()
	}
	act := s.segs[len(s.segs)-1]
	f, err := os.OpenFile(act.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("couldn't open segment: %w", err)
	}
	s.active = f
	for _, sg := range s.segs {
		s.st.Bytes += sg.size
	}
	return nil
}

// scan reads one segment at Open: it records its message IDs and times,
// takes the highest ack, skips corrupt regions (resynchronising on the
// next valid record) and cuts a torn tail off the last segment. It
// reports whether the segment is kept.
func (s *Spool) scan(sg *segment, isLast bool, lastID *uint64) (bool, error) {
	b, err := os.ReadFile(sg.path)
	if err != nil {
		return false, fmt.Errorf("couldn't read segment: %w", err)
	}
	if len(b) < len(segMagic) {
		if string(b) != segMagic[:len(b)] {
			return false, fmt.Errorf("%s is not a quiot spool segment (bad header)", filepath.Base(sg.path))
		}
		// Created, header not (fully) written: a crash at rotation.
		s.log.Warn("spool: removing a segment with no header (torn at creation)", "file", filepath.Base(sg.path))
		return false, os.Remove(sg.path)
	}
	if string(b[:len(segMagic)]) != segMagic {
		return false, fmt.Errorf("%s is not a quiot spool segment (bad header)", filepath.Base(sg.path))
	}
	off := len(segMagic)
	for off < len(b) {
		r, n, err := parseRecord(b[off:])
		if err == nil && r.kind == kindMessage && r.msg.ID <= *lastID {
			err = fmt.Errorf("%w: message id %d after %d", errCorrupt, r.msg.ID, *lastID)
		}
		if err != nil {
			next := resync(b, off+1, *lastID)
			if next < 0 {
				// Nothing valid follows: a torn tail.
				if isLast {
					s.log.Warn("spool: cutting off a torn record at the end of the log", "file", filepath.Base(sg.path), "offset", off, "bytes", len(b)-off, "reason", err)
					if err := os.Truncate(sg.path, int64(off)); err != nil {
						return false, fmt.Errorf("couldn't cut off a torn record: %w", err)
					}
				} else {
					s.log.Warn("spool: ignoring a corrupt segment tail", "file", filepath.Base(sg.path), "offset", off, "bytes", len(b)-off, "reason", err)
					sg.bad = append(sg.bad, [2]int64{int64(off), int64(len(b))})
				}
				s.st.Corrupt++
				s.st.TornBytes += int64(len(b) - off)
				b = b[:off]
				break
			}
			s.log.Warn("spool: skipping a corrupt region", "file", filepath.Base(sg.path), "offset", off, "bytes", next-off, "reason", err)
			s.st.Corrupt++
			sg.bad = append(sg.bad, [2]int64{int64(off), int64(next)})
			off = next
			continue
		}
		switch r.kind {
		case kindMessage:
			if sg.first == 0 {
				sg.first = r.msg.ID
			}
			sg.last, sg.newest = r.msg.ID, r.msg.Time
			*lastID = r.msg.ID
			s.lastTime = max(s.lastTime, r.msg.Time)
		case kindAck:
			s.cursor = max(s.cursor, r.ack)
		}
		off += n
	}
	sg.size = int64(len(b))
	if !isLast && sg.last == 0 {
		// Only acks (or nothing): its cursor is taken, the file can go.
		return false, os.Remove(sg.path)
	}
	return true, nil
}

// resync returns the offset of the next whole, valid record at or after
// from (a message must come after lastID), or -1.
func resync(b []byte, from int, lastID uint64) int {
	for p := from; p+headerSize < len(b); p++ {
		r, _, err := parseRecord(b[p:])
		if err != nil {
			continue
		}
		if r.kind == kindMessage && r.msg.ID <= lastID {
			continue
		}
		return p
	}
	return -1
}

// newSegment seals the active segment (if any) and starts a new one named
// by the next message ID, with the ack cursor as its first record so the
// cursor survives the deletion of older segments. Called with mu held (or
// from load).
func (s *Spool) newSegment() error {
	if s.active != nil {
		if s.o.Fsync != FsyncNever && s.dirty {
			if err := s.active.Sync(); err != nil {
				return fmt.Errorf("couldn't sync segment: %w", err)
			}
			s.st.Fsyncs++
			s.dirty = false
		}
		if err := s.active.Close(); err != nil {
			return fmt.Errorf("couldn't close segment: %w", err)
		}
		s.active = nil
	}
	sg := &segment{name: s.nextID, path: filepath.Join(s.o.Dir, segName(s.nextID))}
	f, err := os.OpenFile(sg.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("couldn't create segment: %w", err)
	}
	hdr := append([]byte(segMagic), appendAck(nil, s.cursor)...)
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return fmt.Errorf("couldn't write segment header: %w", err)
	}
	s.st.Writes++
	s.st.BytesWritten += uint64(len(hdr))
	s.ackDisk = s.cursor
	if s.o.Fsync != FsyncNever {
		if err := f.Sync(); err == nil {
			s.st.Fsyncs++
		}
		if s.dir != nil {
			if err := s.dir.Sync(); err == nil {
				s.st.Fsyncs++
			}
		}
	}
	sg.size = int64(len(hdr))
	s.st.Bytes += sg.size
	s.segs = append(s.segs, sg)
	s.active = f
	return nil
}

// Append adds a message to the spool and returns its ID once it has been
// written (and, with FsyncAlways, synced). ID and Time of m are assigned
// by the spool.
func (s *Spool) Append(ctx context.Context, m Message) (uint64, error) {
	if err := s.check(&m); err != nil {
		return 0, err
	}
	req := &appendReq{m: m, done: make(chan error, 1)}
	if err := s.enqueue(req); err != nil {
		return 0, err
	}
	select {
	case err := <-req.done:
		return req.m.ID, err
	case <-ctx.Done():
		// The append may still happen; the caller gave up waiting.
		return 0, ctx.Err()
	}
}

// AppendBatch adds ms to the spool in their order, in one group commit
// (one write(2) and, with FsyncAlways, one fsync), and returns once they
// have been written (and synced). It returns nil when all were, else one
// error per message (nil: that one was written): a message Append would
// refuse (QoS, ErrTooLarge) is left out and the others are written; a
// failed write or a closed spool fails them all, as does ctx's end (the
// appends may still happen).
func (s *Spool) AppendBatch(ctx context.Context, ms []Message) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(ms))
		}
		errs[i] = err
	}
	reqs := make([]*appendReq, len(ms))
	var queued []*appendReq
	for i := range ms {
		m := ms[i]
		if err := s.check(&m); err != nil {
			fail(i, err)
			continue
		}
		reqs[i] = &appendReq{m: m, done: make(chan error, 1)}
		queued = append(queued, reqs[i])
	}
	if len(queued) == 0 {
		return errs
	}
	if err := s.enqueue(queued...); err != nil {
		for i, r := range reqs {
			if r != nil {
				fail(i, err)
			}
		}
		return errs
	}
	for i, r := range reqs {
		if r == nil {
			continue
		}
		select {
		case err := <-r.done:
			if err != nil {
				fail(i, err)
			}
		case <-ctx.Done():
			fail(i, ctx.Err())
		}
	}
	return errs
}

// check refuses a message the spool cannot take and copies its payload
// (the caller may reuse it).
func (s *Spool) check(m *Message) error {
	if m.QoS > 1 {
		return fmt.Errorf("spool: qos %d (want 0 or 1)", m.QoS)
	}
	if int64(recordSize(len(m.Topic), len(m.Payload))) > min(s.o.MaxBytes/2, maxBody) {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(m.Payload))
	}
	m.Payload = slices.Clone(m.Payload)
	return nil
}

// enqueue queues reqs, in order, for the writer's next group commit.
func (s *Spool) enqueue(reqs ...*appendReq) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.werr != nil {
		err := s.werr
		s.mu.Unlock()
		return err
	}
	s.queue = append(s.queue, reqs...)
	s.mu.Unlock()
	s.kick()
	return nil
}

// kick wakes the writer.
func (s *Spool) kick() {
	select {
	case s.work <- struct{}{}:
	default:
	}
}

// broadcast wakes everyone waiting for a change. Called with mu held.
func (s *Spool) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// writer is the one goroutine that writes: group commits of the queued
// appends and the ack cursor, the interval fsync, the age check.
func (s *Spool) writer() {
	defer s.wg.Done()
	var tick <-chan time.Time
	if s.o.Fsync == FsyncInterval {
		t := time.NewTicker(s.o.FsyncInterval)
		defer t.Stop()
		tick = t.C
	}
	ageTick := make(<-chan time.Time)
	if s.o.MaxAge > 0 {
		t := time.NewTicker(min(max(s.o.MaxAge/10, time.Second), time.Minute))
		defer t.Stop()
		ageTick = t.C
	}
	for {
		select {
		case <-s.work:
			s.flush()
		case <-tick:
			s.mu.Lock()
			s.syncLocked()
			s.mu.Unlock()
		case <-ageTick:
			s.mu.Lock()
			s.expireSegmentsLocked()
			s.mu.Unlock()
		case <-s.stop:
			s.flush()
			return
		}
	}
}

// flush writes the queued appends and the ack cursor in one write(2).
func (s *Spool) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	if len(q) == 0 && s.cursor == s.ackDisk {
		return
	}
	if s.werr != nil {
		for _, r := range q {
			r.done <- s.werr
		}
		return
	}
	size := 0
	for _, r := range q {
		size += recordSize(len(r.m.Topic), len(r.m.Payload))
	}
	// Only appends make room by dropping messages: an ack record written
	// while the spool is full must not evict undelivered messages (the
	// oldest segment is usually the one being delivered); it may pass
	// MaxBytes by its few bytes until the next append or the deletion of a
	// delivered segment.
	err := s.makeRoomLocked(int64(size)+headerSize+9, len(q) > 0)
	if err == nil {
		b := s.buf[:0]
		if s.cursor > s.ackDisk {
			b = appendAck(b, s.cursor)
		}
		act := s.segs[len(s.segs)-1]
		for _, r := range q {
			r.m.ID = s.nextID
			s.nextID++
			r.m.Time = max(s.o.Now().UnixNano(), s.lastTime+1)
			s.lastTime = r.m.Time
			b = appendMessage(b, &r.m)
			if act.first == 0 {
				act.first = r.m.ID
			}
			act.last, act.newest = r.m.ID, r.m.Time
		}
		s.buf = b
		var n int
		n, err = s.active.Write(b)
		s.st.Writes++
		s.st.BytesWritten += uint64(n)
		act.size += int64(n)
		s.st.Bytes += int64(n)
		if err == nil {
			s.dirty = true
			s.ackDisk = s.cursor
			if s.o.Fsync == FsyncAlways && len(q) > 0 {
				err = s.syncLocked()
			}
		} else {
			err = fmt.Errorf("couldn't write spool: %w", err)
		}
		if len(s.buf) > 1<<20 {
			s.buf = nil // do not keep a large batch's buffer
		}
	}
	if err != nil {
		s.werr = err
		s.log.Error("spool write failed; refusing further appends", "error", err)
	} else {
		s.st.Appended += uint64(len(q))
	}
	for _, r := range q {
		r.done <- err
	}
	s.broadcast()
}

// syncLocked fsyncs the active segment if it was written since the last
// sync.
func (s *Spool) syncLocked() error {
	if !s.dirty || s.active == nil {
		return nil
	}
	s.dirty = false
	s.st.Fsyncs++
	if err := s.active.Sync(); err != nil {
		return fmt.Errorf("couldn't sync spool: %w", err)
	}
	return nil
}

// makeRoomLocked rotates the active segment when n more bytes would pass
// SegmentBytes and, when drop is set (an append), deletes the oldest
// segments while the spool would pass MaxBytes.
func (s *Spool) makeRoomLocked(n int64, drop bool) error {
	act := s.segs[len(s.segs)-1]
	if act.size+n > s.o.SegmentBytes && act.last != 0 {
		if err := s.newSegment(); err != nil {
			return err
		}
	}
	for drop && s.st.Bytes+n > s.o.MaxBytes && len(s.segs) > 1 {
		s.dropLocked(s.segs[0], "full")
	}
	return nil
}

// dropLocked deletes a sealed segment, counting its undelivered messages.
func (s *Spool) dropLocked(sg *segment, why string) {
	lost := uint64(0)
	if sg.last > 0 {
		done := max(s.cursor, s.floor, sg.first-1)
		if sg.last > done {
			lost = sg.last - done
		}
		s.floor = max(s.floor, sg.last)
		s.readID = max(s.readID, sg.last)
	}
	if err := os.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("spool: couldn't delete segment", "file", filepath.Base(sg.path), "error", err)
	}
	s.segs = slices.DeleteFunc(s.segs, func(x *segment) bool { return x == sg })
	s.st.Bytes -= sg.size
	if lost > 0 {
		if why == "full" {
			s.st.Dropped += lost
			s.log.Warn("spool full: dropped the oldest undelivered messages", "messages", lost, "ids", fmt.Sprintf("%d-%d", sg.last-lost+1, sg.last), "max_bytes", s.o.MaxBytes)
		} else {
			s.st.Expired += lost
			s.log.Warn("spool: dropped undelivered messages older than max age", "messages", lost, "max_age", s.o.MaxAge)
		}
	} else {
		s.log.Debug("spool: deleted delivered segment", "file", filepath.Base(sg.path))
	}
	s.broadcast()
}

// expireSegmentsLocked deletes sealed segments whose newest message is
// older than MaxAge.
func (s *Spool) expireSegmentsLocked() {
	if s.o.MaxAge <= 0 {
		return
	}
	limit := s.o.Now().Add(-s.o.MaxAge).UnixNano()
	for len(s.segs) > 1 && s.segs[0].newest < limit {
		s.dropLocked(s.segs[0], "age")
	}
}

// deleteDeliveredLocked deletes sealed segments whose messages are all
// delivered.
func (s *Spool) deleteDeliveredLocked() {
	for len(s.segs) > 1 && s.segs[0].last <= max(s.cursor, s.floor) {
		s.dropLocked(s.segs[0], "delivered")
	}
}

// Ack records that every message up to id has been delivered. The cursor
// reaches the log with the next write (group commit); an ack lost to a
// crash only means those messages are sent again.
func (s *Spool) Ack(id uint64) {
	s.mu.Lock()
	if id <= s.cursor || s.closed {
		s.mu.Unlock()
		return
	}
	if id >= s.nextID {
		id = s.nextID - 1
	}
	if done := max(s.cursor, s.floor); id > done {
		s.st.Acked += id - done
	}
	s.cursor = id
	s.deleteDeliveredLocked()
	s.broadcast()
	s.mu.Unlock()
	s.kick()
}

// pendingLocked is the number of undelivered messages.
func (s *Spool) pendingLocked() uint64 {
	done := max(s.cursor, s.floor)
	if last := s.nextID - 1; last > done {
		return last - done
	}
	return 0
}

// Pending returns the number of undelivered messages.
func (s *Spool) Pending() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked()
}

// WaitEmpty blocks until every message appended so far has been
// acknowledged (or dropped), or ctx is done.
func (s *Spool) WaitEmpty(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch, closed := s.pendingLocked()+uint64(len(s.queue)), s.changed, s.closed
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stats returns the counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Pending = s.pendingLocked()
	st.Segments = len(s.segs)
	return st
}

// Sync forces everything written so far to stable storage now, whatever
// the policy.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.syncLocked()
}

// Close writes the ack cursor, syncs (unless the policy is FsyncNever) and
// closes the files. Undelivered messages stay for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true // no more appends; the writer commits those queued
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.o.Fsync != FsyncNever {
		err = s.syncLocked()
	}
	s.rd.close()
	if s.active != nil {
		if cerr := s.active.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if s.dir != nil {
		s.dir.Close()
	}
	s.broadcast()
	s.lock.Close()
	return err
}
