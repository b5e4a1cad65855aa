// Package store keeps the broker's topic space on disk: the epoch and the
// sequence counter, the resume history and the retained messages, in one
// bbolt file (DIR/broker.db), so that a restarted broker keeps its epoch and
// its subscribers resume without a gap.
//
// It implements space.Store. Writes are group commits: messages accepted
// while a commit runs go into the next one, so the publish path costs one
// commit (two fsyncs in bbolt) per batch, not per message. The broker
// applies a message (delivers it, answers a QoS 1 publisher) only once its
// commit has ended, so a crash loses nothing that was acknowledged or seen
// by a subscriber; it can lose QoS 0 messages accepted in the last commit
// interval.
//
// bbolt was chosen over pebble and badger for a Raspberry Pi's SD card and
// RAM by measurement (docs/durability.md): it adds the least to the ARMv6
// binary (the 12 MB budget rules the others out), uses no background
// compaction, and its memory is a page-cache mapping.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/safefile"
)

// FileName is the broker state file inside the data directory.
const FileName = "broker.db"

// formatVersion is the layout of the buckets below; a store written with a
// newer version is refused.
const formatVersion = 1

// magic marks a quiot broker store (key "magic" of the meta bucket).
const magic = "quiot broker store"

var (
	bucketMeta     = []byte("meta")
	bucketHistory  = []byte("history")  // seq -> message record
	bucketRetained = []byte("retained") // topic -> seq(8) + message record
	bucketEvicted  = []byte("evicted")  // topic -> highest evicted seq

	keyMagic     = []byte("magic")
	keyVersion   = []byte("version")
	keyEpoch     = []byte("epoch")
	keySeq       = []byte("seq")
	keyForgotten = []byte("forgotten")
	keyOpen      = []byte("open") // 1 while a broker runs on it
)

// Errors of Open and Load, tested with errors.Is.
var (
	// ErrCorrupt: the state file is damaged (torn write, bad disk).
	ErrCorrupt = errors.New("broker state is corrupt")
	// ErrForeign: the directory or file is not a quiot broker store.
	ErrForeign = errors.New("not a quiot broker data directory")
	// ErrLocked: another process uses the data directory.
	ErrLocked = errors.New("data directory in use by another process")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("store closed")
)

// Options configure a Store. A zero field means its documented default.
type Options struct {
	// Dir is the data directory (required); it is created (mode 0700) if
	// missing.
	Dir string
	// CommitDelay is how long a commit waits for more messages after the
	// first one arrives; zero means none (a commit starts as soon as the
	// previous one has ended, which batches by itself under load).
	CommitDelay time.Duration
	// NoSync skips fsync: a kill -9 loses nothing (the page cache
	// survives), a power cut may lose recent commits. Zero (false) syncs.
	NoSync bool
	// LockTimeout bounds the wait for another process's lock on the file;
	// zero means 1 s.
	LockTimeout time.Duration
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Store is a bbolt broker store. Create it with Open.
type Store struct {
	opts Options
	path string
	db   *bolt.DB
	log  *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	cur     *batch
	forget  []space.ForgetOp
	started bool
	closing bool
	closed  bool
	done    chan struct{} // closed when the committer has stopped
	apply   func([]*space.Message, error)

	stats Stats
}

// Stats count the store's work.
type Stats struct {
	// Commits is the number of write transactions.
	Commits uint64
	// Messages is the number of messages committed.
	Messages uint64
	// Failed is the number of commits that failed.
	Failed uint64
}

// batch is one group commit.
type batch struct {
	msgs []*space.Message
	done chan struct{}
	err  error
}

// Done is closed once the commit has ended.
func (b *batch) Done() <-chan struct{} { return b.done }

// Err is the commit's error once Done is closed.
func (b *batch) Err() error { return b.err }

func newBatch() *batch { return &batch{done: make(chan struct{})} }

var _ space.Store = (*Store)(nil)

// Open opens (or creates) the store in o.Dir. It refuses a path that is not
// a directory, a state file that is not a quiot broker store (ErrForeign),
// a damaged one (ErrCorrupt), and one another process holds (ErrLocked).
func Open(o Options) (*Store, error) {
	o.ensureDefaults()
	if o.Dir == "" {
		return nil, errors.New("store: no data directory")
	}
	if fi, err := os.Stat(o.Dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrForeign, o.Dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("couldn't read data directory: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("couldn't create data directory: %w", err)
	}
	if err := safefile.CheckDir(o.Dir); err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, FileName)
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrForeign, path)
	} else if err == nil && fi.Size() == 0 {
		// An empty file: a crash while the file was being created, before
		// bbolt wrote its first pages. Nothing was ever committed.
		o.Logger.Warn("empty broker state file (created, never written): starting afresh", "path", path)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("couldn't remove empty state file: %w", err)
		}
	}
	db, err := openBolt(path, &bolt.Options{
		Timeout:        o.LockTimeout,
		NoSync:         o.NoSync,
		NoFreelistSync: true, // rebuilt at open: fewer bytes per commit
		FreelistType:   bolt.FreelistMapType,
	})
	switch {
	case errors.Is(err, safefile.ErrUnsafe):
		return nil, err
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%w: %s is not a bbolt file, or both its headers are destroyed (%v); move it away to start with empty state (a new epoch)", ErrForeign, path, err)
	case errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %v; move it away to start with empty state (a new epoch)", ErrCorrupt, path, err)
	case err != nil:
		return nil, fmt.Errorf("%w: couldn't open %s: %v; move it away to start with empty state (a new epoch)", ErrCorrupt, path, err)
	}
	s := &Store{opts: o, path: path, db: db, log: o.Logger, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

// faultsPanic makes a memory fault of the calling goroutine a panic (which
// the caller's recover turns into an error) instead of a crash, and returns
// the undo. bbolt reads its file through mmap, and a mangled page can name
// a page outside the file: reading it faults, and whether the address
// happens to be mapped by something else decides between bbolt's own panic
// and the process dying with SIGSEGV (seen once in make test's
// TestBadDataDir).
func faultsPanic() (undo func()) {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

// openBolt is bolt.Open with its panics and memory faults (a mangled file)
// turned into errors.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer faultsPanic()()
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("bbolt: %v", r)
		}
	}()
	o.OpenFile = safefile.OpenInDir // no symbolic link, nobody else's file
	return bolt.Open(path, 0o600, o)
}

// Path is the state file.
func (s *Store) Path() string { return s.path }

// Load reads the saved state. A file without buckets is a fresh store; a
// bbolt file of something else is ErrForeign; damaged pages or records are
// ErrCorrupt (never a silent reset: the caller decides).
func (s *Store) Load() (st *space.StoredState, err error) {
	defer faultsPanic()()
	defer func() {
		if r := recover(); r != nil { // bbolt panics on mangled pages
			st, err = nil, fmt.Errorf("%w: %s: %v; move it away to start with empty state (a new epoch)", ErrCorrupt, s.path, r)
		}
	}()
	st = &space.StoredState{Evicted: map[string]uint64{}}
	err = s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("%w: %s holds another program's bbolt data", ErrForeign, s.path)
			}
			st.Fresh = true
			return nil
		}
		if string(meta.Get(keyMagic)) != magic {
			return fmt.Errorf("%w: %s holds another program's bbolt data", ErrForeign, s.path)
		}
		v, ok := getU64(meta.Get(keyVersion))
		if !ok {
			return fmt.Errorf("%w: %s: no format version", ErrCorrupt, s.path)
		}
		if v > formatVersion {
			return fmt.Errorf("%w: %s has format %d, this quiot reads up to %d (written by a newer quiot)", ErrForeign, s.path, v, formatVersion)
		}
		var ok1, ok2, ok3 bool
		st.Epoch, ok1 = getU64(meta.Get(keyEpoch))
		st.Seq, ok2 = getU64(meta.Get(keySeq))
		st.Forgotten, ok3 = getU64(meta.Get(keyForgotten))
		if !ok1 || !ok2 || !ok3 || st.Epoch == 0 {
			return fmt.Errorf("%w: %s: bad meta record", ErrCorrupt, s.path)
		}
		st.Unclean = len(meta.Get(keyOpen)) == 1 && meta.Get(keyOpen)[0] == 1
		if err := tx.Bucket(bucketHistory).ForEach(func(k, v []byte) error {
			seq, ok := getU64(k)
			if !ok {
				return fmt.Errorf("history key %x", k)
			}
			m, err := decodeMessage(seq, v)
			if err != nil {
				return fmt.Errorf("history %d: %w", seq, err)
			}
			if seq > st.Seq {
				return fmt.Errorf("history %d beyond the saved sequence counter %d", seq, st.Seq)
			}
			st.History = append(st.History, m)
			return nil
		}); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, s.path, err)
		}
		if err := tx.Bucket(bucketRetained).ForEach(func(k, v []byte) error {
			seq, ok := getU64(v[:min(8, len(v))])
			if !ok {
				return fmt.Errorf("retained %q: short record", k)
			}
			m, err := decodeMessage(seq, v[8:])
			if err != nil || m.Topic != string(k) {
				return fmt.Errorf("retained %q: %v", k, err)
			}
			st.Retained = append(st.Retained, m)
			return nil
		}); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, s.path, err)
		}
		return tx.Bucket(bucketEvicted).ForEach(func(k, v []byte) error {
			ev, ok := getU64(v)
			if !ok {
				return fmt.Errorf("%w: %s: evicted %q: bad value", ErrCorrupt, s.path, k)
			}
			st.Evicted[string(k)] = ev
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Start writes the epoch and the running mark, and starts the committer.
func (s *Store) Start(epoch uint64, apply func([]*space.Message, error)) error {
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return errors.New("store: already started or closed")
	}
	s.started = true
	s.apply = apply
	s.cur = newBatch()
	s.mu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		for _, b := range [][]byte{bucketHistory, bucketRetained, bucketEvicted} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if meta.Get(keySeq) == nil {
			for k, v := range map[string][]byte{"seq": u64(0), "forgotten": u64(0)} {
				if err := meta.Put([]byte(k), v); err != nil {
					return err
				}
			}
		}
		for k, v := range map[string][]byte{"magic": []byte(magic), "version": u64(formatVersion), "epoch": u64(epoch), "open": {1}} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("couldn't write broker state: %w", err)
	}
	go s.run()
	return nil
}

// Append queues m for the next commit.
func (s *Store) Append(m *space.Message) space.Commit {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.closing {
		b := newBatch()
		b.err = ErrClosed
		close(b.done)
		return b
	}
	b := s.cur
	b.msgs = append(b.msgs, m)
	if len(b.msgs) == 1 {
		s.cond.Signal()
	}
	return b
}

// Forget queues removals for the next commit.
func (s *Store) Forget(ops []space.ForgetOp) {
	s.mu.Lock()
	s.forget = append(s.forget, ops...)
	s.mu.Unlock()
}

// run is the committer: one transaction per batch, then the batch is
// applied and its waiters released.
func (s *Store) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.cur.msgs) == 0 && !s.closing {
			s.cond.Wait()
		}
		if len(s.cur.msgs) == 0 && s.closing {
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if d := s.opts.CommitDelay; d > 0 {
			time.Sleep(d) // gather more messages into this commit
		}
		s.mu.Lock()
		b, fo := s.cur, s.forget
		s.cur, s.forget = newBatch(), nil
		s.mu.Unlock()
		b.err = s.write(b.msgs, fo, false)
		s.mu.Lock()
		s.stats.Commits++
		if b.err != nil {
			s.stats.Failed++
		} else {
			s.stats.Messages += uint64(len(b.msgs))
		}
		s.mu.Unlock()
		if b.err != nil {
			s.log.Error("couldn't commit broker state: publishers get an error", "messages", len(b.msgs), "error", b.err)
			if len(fo) > 0 { // retry the removals with the next commit
				s.Forget(fo)
			}
		}
		s.apply(b.msgs, b.err)
		close(b.done)
	}
}

// write commits messages and removals in one transaction; final also
// clears the running mark.
func (s *Store) write(msgs []*space.Message, fo []space.ForgetOp, final bool) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, hist := tx.Bucket(bucketMeta), tx.Bucket(bucketHistory)
		ret, ev := tx.Bucket(bucketRetained), tx.Bucket(bucketEvicted)
		hist.FillPercent = 1 // keys only grow: pack the pages
		var last uint64
		for _, m := range msgs {
			// bbolt keeps the value slice until the commit: one each.
			buf := encodeMessage(nil, m)
			if err := hist.Put(u64(m.Seq), buf); err != nil {
				return err
			}
			if m.Retain {
				var err error
				if len(m.Payload) == 0 {
					err = ret.Delete([]byte(m.Topic))
				} else {
					err = ret.Put([]byte(m.Topic), append(u64(m.Seq), buf...))
				}
				if err != nil {
					return err
				}
			}
			last = m.Seq
		}
		if last > 0 {
			if err := meta.Put(keySeq, u64(last)); err != nil {
				return err
			}
		}
		for _, op := range fo {
			var err error
			switch op.Kind {
			case space.ForgetMessage:
				if err = hist.Delete(u64(op.Seq)); err == nil {
					err = ev.Put([]byte(op.Topic), u64(op.Evicted))
				}
			case space.ForgetTopic:
				if err = ev.Delete([]byte(op.Topic)); err == nil {
					err = meta.Put(keyForgotten, u64(op.Evicted))
				}
			}
			if err != nil {
				return err
			}
		}
		if final {
			return meta.Put(keyOpen, []byte{0})
		}
		return nil
	})
}

// Close commits what is queued, marks the state as cleanly closed and
// closes the file. It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed, s.closing = true, true
	started := s.started
	s.cond.Broadcast()
	s.mu.Unlock()
	var err error
	if started {
		<-s.done
		s.mu.Lock()
		fo := s.forget
		s.forget = nil
		s.mu.Unlock()
		err = s.write(nil, fo, true)
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
