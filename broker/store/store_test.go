package store_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	bolt "go.etcd.io/bbolt"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/store"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// openBroker opens the store in dir and a broker on it (not listening).
func openBroker(t *testing.T, dir string, l broker.Limits) (*broker.Broker, error) {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
	if err != nil {
		return nil, err
	}
	pki := testutil.NewPKI(t)
	b, err := broker.New(&broker.Options{Certificates: pkiCerts(pki), Store: st, Limits: l, Logger: testutil.DiscardLogger()})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, nil
}

func mustPublish(t *testing.T, b *broker.Broker, m broker.Message) uint64 {
	t.Helper()
	seq, err := b.Publish(context.Background(), m)
	if err != nil {
		t.Fatalf("publish %s: %v", m.Topic, err)
	}
	return seq
}

func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	b, err := openBroker(t, dir, broker.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	epoch := b.Epoch()
	for i := range 10 {
		mustPublish(t, b, broker.Message{Topic: fmt.Sprintf("t/%d", i%3), Payload: fmt.Appendf(nil, "m%d", i), QoS: 1, Time: int64(i)})
	}
	mustPublish(t, b, broker.Message{Topic: "cfg", Payload: []byte("on"), QoS: 1, Retain: true})
	mustPublish(t, b, broker.Message{Topic: "gone", Payload: []byte("x"), QoS: 1, Retain: true})
	mustPublish(t, b, broker.Message{Topic: "gone", QoS: 1, Retain: true}) // clears it
	before := b.Stats()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b2, err := openBroker(t, dir, broker.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	after := b2.Stats()
	if b2.Epoch() != epoch {
		t.Errorf("epoch %x after restart, want %x", b2.Epoch(), epoch)
	}
	if after.LastSeq != before.LastSeq || after.HistoryMessages != before.HistoryMessages ||
		after.HistoryBytes != before.HistoryBytes || after.Retained != 1 || after.RetainedBytes != before.RetainedBytes {
		t.Errorf("after restart: %+v\nbefore: %+v", after, before)
	}
	if seq := mustPublish(t, b2, broker.Message{Topic: "t/0", Payload: []byte("next"), QoS: 1}); seq != before.LastSeq+1 {
		t.Errorf("next seq %d, want %d", seq, before.LastSeq+1)
	}
}

// TestRestartKeepsEvictions: history evicted before the restart stays
// evicted (on disk too), and a resume before it is still told of the gap.
func TestRestartKeepsEvictions(t *testing.T) {
	dir := t.TempDir()
	l := broker.Limits{HistoryPerTopic: 2}
	b, err := openBroker(t, dir, l)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		mustPublish(t, b, broker.Message{Topic: "a", Payload: fmt.Appendf(nil, "%d", i), QoS: 1})
	}
	mustPublish(t, b, broker.Message{Topic: "b", Payload: []byte("b"), QoS: 1}) // carries a's evictions to disk
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, dir, "history"); n != 3 {
		t.Errorf("%d history records on disk, want 3", n)
	}
	// With a smaller limit, the replay evicts more, and says so on disk.
	b2, err := openBroker(t, dir, broker.Limits{HistoryPerTopic: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := b2.Stats(); s.HistoryMessages != 2 || s.LastSeq != 7 {
		t.Errorf("after restart: %+v", s)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, dir, "history"); n != 2 {
		t.Errorf("%d history records on disk, want 2", n)
	}
	if ev := readU64(t, dir, "evicted", "a"); ev != 5 {
		t.Errorf("evicted mark of a = %d, want 5", ev)
	}
}

func countKeys(t *testing.T, dir, bucket string) int {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	_ = db.View(func(tx *bolt.Tx) error { n = tx.Bucket([]byte(bucket)).Stats().KeyN; return nil })
	return n
}

func readU64(t *testing.T, dir, bucket, key string) uint64 {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	_ = db.View(func(tx *bolt.Tx) error { v = append(v, tx.Bucket([]byte(bucket)).Get([]byte(key))...); return nil })
	if len(v) != 8 {
		t.Fatalf("%s/%s: %x", bucket, key, v)
	}
	return uint64(v[0])<<56 | uint64(v[1])<<48 | uint64(v[2])<<40 | uint64(v[3])<<32 | uint64(v[4])<<24 | uint64(v[5])<<16 | uint64(v[6])<<8 | uint64(v[7])
}

// TestUncleanRestart: state committed before a crash (no Close) is kept,
// with the epoch.
func TestUncleanRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var applied []*broker.Message
	if _, err := st.Load(); err != nil {
		t.Fatal(err)
	}
	if err := st.Start(42, func(ms []*broker.Message, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			applied = append(applied, ms...)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 5; i++ {
		c := st.Append(&broker.Message{Topic: "x", Seq: i, Payload: []byte{byte(i)}, QoS: 1})
		<-c.Done()
		if c.Err() != nil {
			t.Fatal(c.Err())
		}
	}
	// A second open of the same file while the first holds it is refused.
	if _, err := store.Open(store.Options{Dir: dir, LockTimeout: 50 * time.Millisecond}); !errors.Is(err, store.ErrLocked) {
		t.Errorf("second open: %v, want ErrLocked", err)
	}
	// Simulate the crash: copy the file as it is now (committed, not closed).
	crashed := t.TempDir()
	data, err := os.ReadFile(filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, store.FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	s := reopen(t, crashed)
	if !s.Unclean || s.Epoch != 42 || s.Seq != 5 || len(s.History) != 5 || s.History[4].Payload[0] != 5 {
		t.Errorf("loaded %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied) != 5 {
		t.Errorf("applied %d messages, want 5", len(applied))
	}
}

// TestBadDataDir: a corrupt or foreign data directory is refused with a
// clear error; nothing panics and nothing is reset.
func TestBadDataDir(t *testing.T) {
	good := func(t *testing.T) string {
		dir := t.TempDir()
		b, err := openBroker(t, dir, broker.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			mustPublish(t, b, broker.Message{Topic: "t", Payload: make([]byte, 100+i), QoS: 1, Retain: i == 0})
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	patch := func(off int64, b []byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, store.FileName), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill := func(n int, v byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = v
		}
		return b
	}
	tests := []struct {
		name   string
		setup  func(t *testing.T) string
		damage func(t *testing.T, dir string)
		want   error
	}{
		{"dir is a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, nil, store.ErrForeign},
		{"text file", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, store.FileName), []byte("hello, this is not a database\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, nil, store.ErrForeign},
		{"another program's bbolt", func(t *testing.T) string {
			dir := t.TempDir()
			db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Update(func(tx *bolt.Tx) error {
				b, _ := tx.CreateBucket([]byte("mochi"))
				return b.Put([]byte("k"), []byte("v"))
			})
			_ = db.Close()
			return dir
		}, nil, store.ErrForeign},
		{"newer format", good, func(t *testing.T, dir string) {
			db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte{0, 0, 0, 0, 0, 0, 0, 99})
			})
			_ = db.Close()
		}, store.ErrForeign},
		{"bad history record", good, func(t *testing.T, dir string) {
			db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket([]byte("history")).Put([]byte{0, 0, 0, 0, 0, 0, 0, 7}, []byte{9, 9, 9})
			})
			_ = db.Close()
		}, store.ErrCorrupt},
		{"meta pages zeroed", good, patch(0, make([]byte, 8192)), nil},
		// One torn meta page is bbolt's normal crash recovery (the other
		// one, of the previous commit, is used); both damaged is not.
		{"both meta checksums", good, func(t *testing.T, dir string) {
			patch(60, fill(4, 0xa5))(t, dir)
			patch(4096+60, fill(4, 0xa5))(t, dir)
		}, store.ErrCorrupt},
		{"data pages garbage", good, patch(4*4096, fill(3*4096, 0x5a)), nil},
		{"truncated", good, func(t *testing.T, dir string) {
			p := filepath.Join(dir, store.FileName)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, fi.Size()/3); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.setup(t)
			if tt.damage != nil {
				tt.damage(t, dir)
			}
			var before []byte
			if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
				before, _ = os.ReadFile(filepath.Join(dir, store.FileName))
			}
			_, err := openBroker(t, dir, broker.Limits{})
			if err == nil {
				t.Fatal("a damaged or foreign data directory was accepted")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %q, want %v", err, tt.want)
			}
			if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrForeign) {
				t.Errorf("error %q is neither ErrCorrupt nor ErrForeign", err)
			}
			t.Logf("error: %v", err)
			if before != nil {
				after, _ := os.ReadFile(filepath.Join(dir, store.FileName))
				if string(after) != string(before) {
					t.Error("the state file was changed")
				}
			}
		})
	}
}

// TestTornMetaPage: one torn meta page is bbolt's crash recovery (the
// other one, of the commit before, is used), not corruption.
func TestTornMetaPage(t *testing.T) {
	dir := t.TempDir()
	b, err := openBroker(t, dir, broker.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	epoch := b.Epoch()
	for i := range 20 {
		mustPublish(t, b, broker.Message{Topic: "t", Payload: []byte{byte(i)}, QoS: 1})
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{60, 4096 + 60} {
		f, err := os.OpenFile(filepath.Join(dir, store.FileName), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteAt([]byte{0xa5, 0xa5, 0xa5, 0xa5}, off)
		_ = f.Close()
		b2, err := openBroker(t, dir, broker.Limits{})
		if err != nil {
			t.Fatalf("meta page at %d torn: %v", off-60, err)
		}
		if b2.Epoch() != epoch || b2.Stats().LastSeq < 19 {
			t.Errorf("meta page at %d torn: epoch %x seq %d", off-60, b2.Epoch(), b2.Stats().LastSeq)
		}
		_ = b2.Close() // its commits rewrite the meta pages
	}
}

// TestEmptyDirIsFresh: a missing or empty data directory gives a new epoch.
func TestEmptyDirIsFresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "state")
	b, err := openBroker(t, dir, broker.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Epoch() == 0 {
		t.Error("no epoch")
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v %v", fi.Mode(), err)
	}
}

func pkiCerts(p *testutil.PKI) []tls.Certificate { return []tls.Certificate{p.Server.TLS} }

// startOn starts a broker with a store in dir on addr ("127.0.0.1:0" for a
// new port) and returns it with its URL.
func startOn(t *testing.T, pki *testutil.PKI, dir, addr string) *brokertest.Broker {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return brokertest.Start(t, pki, &broker.Options{Listen: addr, Store: st})
}

// TestResumeAcrossRestart: an HTTP/3 subscriber that stays subscribed gets
// every message once, in order, with no gap, across a broker restart.
func TestResumeAcrossRestart(t *testing.T) {
	pki := testutil.NewPKI(t)
	dir := t.TempDir()
	b := startOn(t, pki, dir, "127.0.0.1:0")
	addr := b.Addr().String()
	sub, err := client.New(client.Options{Broker: b.URL, RootCAs: pki.Pool(), Reconnect: true, MaxBackoff: 200 * time.Millisecond, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	got := make(chan client.Message, 100)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = sub.Subscribe(ctx, "r/#", 0, func(m client.Message) { got <- m }) }()
	next := func() client.Message {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no message within 30 s")
		}
		return client.Message{}
	}
	// Live once a probe arrives (re-published until then).
	waitFor(t, "the subscription", func() bool {
		mustPublish(t, b.Broker, broker.Message{Topic: "r/probe", Payload: []byte("p"), QoS: 1})
		select {
		case <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	for len(got) > 0 { // late probes
		<-got
	}
	var want, seqs []uint64
	for i := range 5 {
		want = append(want, mustPublish(t, b.Broker, broker.Message{Topic: "r/a", Payload: fmt.Appendf(nil, "%d", i), QoS: 1}))
	}
	for len(seqs) < 5 {
		if m := next(); m.Topic == "r/a" {
			seqs = append(seqs, m.Seq)
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := b.Shutdown(ctx2); err != nil {
		t.Fatal(err)
	}
	b2 := startOn(t, pki, dir, addr)
	if b2.Epoch() != b.Epoch() {
		t.Fatalf("epoch changed across the restart")
	}
	for i := 5; i < 10; i++ {
		want = append(want, mustPublish(t, b2.Broker, broker.Message{Topic: "r/b", Payload: fmt.Appendf(nil, "%d", i), QoS: 1}))
	}
	for len(seqs) < 10 {
		m := next()
		if m.Gap {
			t.Fatalf("gap announced: %+v", m)
		}
		if m.Topic != "r/probe" {
			seqs = append(seqs, m.Seq)
		}
	}
	if !slices.Equal(seqs, want) {
		t.Fatalf("sequence numbers %v, want %v", seqs, want)
	}
	if want[5] != want[4]+1 {
		t.Errorf("the sequence counter did not continue across the restart: %v", want)
	}
	select {
	case m := <-got:
		t.Errorf("extra message %+v", m)
	default:
	}
}

// TestBatchRecords: the messages of one group commit keep their own
// records (regression: one reused encoding buffer gave bbolt, which keeps
// the value slices until the commit, the same bytes for all of them).
func TestBatchRecords(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(); err != nil {
		t.Fatal(err)
	}
	hold, release := make(chan struct{}), make(chan struct{})
	first := true
	if err := st.Start(7, func([]*broker.Message, error) {
		if first { // hold the committer after the first batch
			first = false
			close(hold)
			<-release
		}
	}); err != nil {
		t.Fatal(err)
	}
	st.Append(&broker.Message{Topic: "t/0", Seq: 1, Payload: []byte("p0"), QoS: 1})
	<-hold
	var last broker.Commit
	for i := uint64(2); i <= 10; i++ { // all in the second batch
		last = st.Append(&broker.Message{Topic: fmt.Sprintf("t/%d", i), Seq: i, Payload: fmt.Appendf(nil, "payload %d", i), QoS: 1, Origin: "h3", Identity: fmt.Sprintf("id%d", i), Time: int64(i)})
	}
	close(release)
	<-last.Done()
	if err := last.Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	s := reopen(t, dir)
	if len(s.History) != 10 {
		t.Fatalf("%d messages loaded, want 10", len(s.History))
	}
	for _, m := range s.History[1:] {
		i := m.Seq
		if m.Topic != fmt.Sprintf("t/%d", i) || string(m.Payload) != fmt.Sprintf("payload %d", i) || m.Identity != fmt.Sprintf("id%d", i) || m.Time != int64(i) || m.Origin != "h3" {
			t.Errorf("message %d loaded as %+v", i, m)
		}
	}
}

// reopen opens the store in dir again (closed at the end of the test) and
// loads what it holds.
func reopen(t *testing.T, dir string) *broker.StoredState {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
