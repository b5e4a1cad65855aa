package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func open(t *testing.T, o Options) *Spool {
	t.Helper()
	if o.Logger == nil {
		o.Logger = discard()
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func appendN(t *testing.T, s *Spool, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := s.Append(ctx(t), Message{Topic: "t/" + fmt.Sprint(i%3), Payload: []byte(fmt.Sprintf("m%05d", i)), QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// drain reads every pending message (acking each) and returns the payloads.
func drain(t *testing.T, s *Spool) []string {
	t.Helper()
	var got []string
	var lastID uint64
	var lastTime int64
	for s.Pending() > 0 {
		m, err := s.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.ID <= lastID || m.Time <= lastTime {
			t.Fatalf("message %d (time %d) after %d (time %d): not in order", m.ID, m.Time, lastID, lastTime)
		}
		lastID, lastTime = m.ID, m.Time
		got = append(got, string(m.Payload))
		s.Ack(m.ID)
	}
	return got
}

func want(from, n int) []string {
	var w []string
	for i := from; i < from+n; i++ {
		w = append(w, fmt.Sprintf("m%05d", i))
	}
	return w
}

func equal(t *testing.T, got, w []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(w) {
		t.Fatalf("got %d messages %v\nwant %d %v", len(got), got, len(w), w)
	}
}

func TestAppendNextAck(t *testing.T) {
	for _, p := range []Fsync{FsyncInterval, FsyncAlways, FsyncNever} {
		t.Run(p.String(), func(t *testing.T) {
			s := open(t, Options{Dir: t.TempDir(), Fsync: p})
			appendN(t, s, 0, 50)
			if n := s.Pending(); n != 50 {
				t.Fatalf("pending %d, want 50", n)
			}
			equal(t, drain(t, s), want(0, 50))
			if err := s.WaitEmpty(ctx(t)); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if st.Appended != 50 || st.Acked != 50 || st.Pending != 0 {
				t.Fatalf("stats %+v", st)
			}
			if p == FsyncAlways && st.Fsyncs < 50 {
				t.Fatalf("always: %d fsyncs for 50 sequential appends", st.Fsyncs)
			}
			if p == FsyncNever && st.Fsyncs != 0 {
				t.Fatalf("never: %d fsyncs", st.Fsyncs)
			}
		})
	}
}

func TestFieldsRoundTrip(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir()})
	in := []Message{
		{Topic: "a/b", Payload: []byte("x"), QoS: 1, Retain: true},
		{Topic: "", Payload: nil, QoS: 0},
		{Topic: "ü/#", Payload: bytes.Repeat([]byte{0, 0xff}, 70000), QoS: 0, Retain: true},
	}
	for _, m := range in {
		if _, err := s.Append(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range in {
		m, err := s.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != uint64(i+1) || m.Topic != w.Topic || !bytes.Equal(m.Payload, w.Payload) || m.QoS != w.QoS || m.Retain != w.Retain || m.Time == 0 {
			t.Fatalf("message %d = %+v, want %+v", i, m, w)
		}
	}
}

func TestNextWaitsForAppend(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir()})
	got := make(chan Message, 1)
	go func() {
		m, err := s.Next(ctx(t))
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	appendN(t, s, 7, 1)
	if m := <-got; string(m.Payload) != "m00007" {
		t.Fatalf("got %q", m.Payload)
	}
}

func TestReopenResumesAfterCursor(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	appendN(t, s, 0, 10)
	for range 4 {
		m, err := s.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		s.Ack(m.ID)
	}
	s.Close()
	s = open(t, Options{Dir: dir})
	if st := s.Stats(); st.Recovered != 6 {
		t.Fatalf("recovered %d, want 6", st.Recovered)
	}
	appendN(t, s, 10, 2)
	equal(t, drain(t, s), want(4, 8))
	s.Close()
	s = open(t, Options{Dir: dir})
	if n := s.Pending(); n != 0 {
		t.Fatalf("pending %d after everything was acked", n)
	}
	appendN(t, s, 12, 1)
	m, err := s.Next(ctx(t))
	if err != nil || m.ID != 13 {
		t.Fatalf("next = %d, %v; want id 13 (IDs are never reused)", m.ID, err)
	}
}

// segFiles returns the segment files of dir, oldest first.
func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, segPrefix+"*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func TestTornTail(t *testing.T) {
	// The log after 5 appends; then the last file is damaged as a crash
	// would leave it.
	rec := appendMessage(nil, &Message{ID: 6, Time: 1 << 62, Topic: "t/0", Payload: []byte("m00005")})
	tests := []struct {
		name   string
		damage func(b []byte) []byte
		keep   int // whole messages expected
	}{
		{"half a header", func(b []byte) []byte { return append(b, rec[:3]...) }, 5},
		{"header only", func(b []byte) []byte { return append(b, rec[:headerSize]...) }, 5},
		{"half a body", func(b []byte) []byte { return append(b, rec[:len(rec)-2]...) }, 5},
		{"zeros (extent allocated, data lost)", func(b []byte) []byte { return append(b, make([]byte, 4096)...) }, 5},
		{"bad checksum", func(b []byte) []byte {
			r := bytes.Clone(rec)
			r[len(r)-1] ^= 1
			return append(b, r...)
		}, 5},
		{"last record cut", func(b []byte) []byte { return b[:len(b)-1] }, 4},
		{"intact", func(b []byte) []byte { return b }, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, Options{Dir: dir})
			appendN(t, s, 0, 5)
			s.Close()
			f := segFiles(t, dir)
			last := f[len(f)-1]
			b, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(last, tt.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			s = open(t, Options{Dir: dir})
			st := s.Stats()
			if tt.name != "intact" && st.TornBytes == 0 {
				t.Fatalf("torn tail not detected: %+v", st)
			}
			appendN(t, s, 100, 2) // appends after the cut are whole
			got := drain(t, s)
			equal(t, got, append(want(0, tt.keep), want(100, 2)...))
			s.Close()
			s = open(t, Options{Dir: dir})
			if st := s.Stats(); st.TornBytes != 0 || st.Pending != 0 {
				t.Fatalf("second open after repair: %+v", st)
			}
		})
	}
}

func TestCorruptRecordInSealedSegment(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, SegmentBytes: 4096, MaxBytes: 1 << 20})
	appendN(t, s, 0, 300)
	s.Close()
	f := segFiles(t, dir)
	if len(f) < 3 {
		t.Fatalf("%d segments, want several", len(f))
	}
	b, err := os.ReadFile(f[0])
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte in the payload of the third record of the first segment.
	off := len(segMagic)
	for range 3 { // the cursor record, then two messages
		_, n, err := parseRecord(b[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	b[off+headerSize+20] ^= 0x40
	if err := os.WriteFile(f[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, Options{Dir: dir, SegmentBytes: 4096, MaxBytes: 1 << 20})
	if st := s.Stats(); st.Corrupt != 1 {
		t.Fatalf("corrupt = %d, want 1", st.Corrupt)
	}
	got := drain(t, s)
	w := append(want(0, 2), want(3, 297)...)
	equal(t, got, w)
}

func TestFullDropsOldest(t *testing.T) {
	var logs bytes.Buffer
	s := open(t, Options{Dir: t.TempDir(), MaxBytes: 16 << 10, SegmentBytes: 4 << 10, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const n = 1000
	appendN(t, s, 0, n)
	st := s.Stats()
	if st.Dropped == 0 || st.Dropped+st.Pending != n || st.Bytes > 16<<10 {
		t.Fatalf("stats %+v: want drops, dropped+pending = %d, bytes <= 16 KiB", st, n)
	}
	got := drain(t, s)
	equal(t, got, want(n-len(got), len(got)))
	// Delivering and acknowledging drops nothing more (ack records written
	// into a full spool used to evict the segment being delivered).
	if after := s.Stats(); after.Dropped != st.Dropped || uint64(len(got)) != st.Pending {
		t.Fatalf("after the drain: dropped %d (was %d), delivered %d of %d pending", after.Dropped, st.Dropped, len(got), st.Pending)
	}
	if !bytes.Contains(logs.Bytes(), []byte("spool full: dropped the oldest undelivered messages")) {
		t.Fatalf("drops not logged:\n%s", logs.String())
	}
}

func TestMaxAge(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := open(t, Options{Dir: t.TempDir(), MaxAge: time.Hour, Now: clock})
	appendN(t, s, 0, 3)
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	appendN(t, s, 3, 2)
	equal(t, drain(t, s), want(3, 2))
	if st := s.Stats(); st.Expired != 3 {
		t.Fatalf("expired %d, want 3", st.Expired)
	}
}

func TestDeliveredSegmentsDeleted(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, SegmentBytes: 4096})
	appendN(t, s, 0, 500)
	if n := len(segFiles(t, dir)); n < 5 {
		t.Fatalf("%d segments", n)
	}
	drain(t, s)
	appendN(t, s, 500, 1) // a write after the last ack
	if f := segFiles(t, dir); len(f) != 1 {
		t.Fatalf("segments after delivery: %v", f)
	}
	drain(t, s)
	s.Close()
	s = open(t, Options{Dir: dir, SegmentBytes: 4096})
	if n := s.Pending(); n != 0 {
		t.Fatalf("pending %d", n)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Run("locked", func(t *testing.T) {
		dir := t.TempDir()
		open(t, Options{Dir: dir})
		if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrLocked) {
			t.Fatalf("second open: %v, want ErrLocked", err)
		}
	})
	t.Run("foreign segment", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), []byte("PK\x03\x04 not a spool"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(Options{Dir: dir}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not a quiot spool segment")) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no dir", func(t *testing.T) {
		if _, err := Open(Options{}); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("too large", func(t *testing.T) {
		s := open(t, Options{Dir: t.TempDir(), MaxBytes: 64 << 10})
		if _, err := s.Append(ctx(t), Message{Topic: "a", Payload: make([]byte, 40<<10)}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestParseFsync(t *testing.T) {
	tests := []struct {
		in   string
		p    Fsync
		d    time.Duration
		fail bool
	}{
		{"always", FsyncAlways, 0, false},
		{"never", FsyncNever, 0, false},
		{"interval", FsyncInterval, 0, false},
		{"250ms", FsyncInterval, 250 * time.Millisecond, false},
		{"0s", 0, 0, true},
		{"sometimes", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, d, err := ParseFsync(tt.in)
			if (err != nil) != tt.fail || p != tt.p || d != tt.d {
				t.Fatalf("ParseFsync = %v, %v, %v", p, d, err)
			}
		})
	}
}

func TestConcurrentAppendsKeepOrderAndGroup(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir(), Fsync: FsyncAlways})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if _, err := s.Append(ctx(t), Message{Topic: fmt.Sprint(g), Payload: []byte(fmt.Sprint(i))}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	per := map[string]int{}
	for s.Pending() > 0 {
		m, err := s.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprint(per[m.Topic]) {
			t.Fatalf("topic %s: got %s, want %d", m.Topic, m.Payload, per[m.Topic])
		}
		per[m.Topic]++
		s.Ack(m.ID)
	}
	st := s.Stats()
	t.Logf("200 appends from 8 goroutines: %d writes, %d fsyncs", st.Writes, st.Fsyncs)
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
