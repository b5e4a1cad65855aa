package broker_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/wire"
)

// lazyStore is a broker.Store that commits only when someone waits for a
// commit (the slowest store there is): it records the most messages it ever
// held uncommitted.
type lazyStore struct {
	mu       sync.Mutex
	apply    func([]*broker.Message, error)
	pending  []*broker.Message
	batch    *lazyCommit
	maxPend  int
	commitMu sync.Mutex // one commit at a time, in order
}

type lazyCommit struct {
	s    *lazyStore
	once sync.Once
	done chan struct{}
}

func (c *lazyCommit) Done() <-chan struct{} {
	c.once.Do(func() { go c.s.commit() })
	return c.done
}

func (c *lazyCommit) Err() error { return nil }

func (s *lazyStore) Load() (*broker.StoredState, error) { return &broker.StoredState{Fresh: true}, nil }

func (s *lazyStore) Start(_ uint64, apply func([]*broker.Message, error)) error {
	s.apply = apply
	s.batch = &lazyCommit{s: s, done: make(chan struct{})}
	return nil
}

func (s *lazyStore) Append(m *broker.Message) broker.Commit {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, m)
	s.maxPend = max(s.maxPend, len(s.pending))
	return s.batch
}

// commit commits everything pending (a waiter's batch and all before it).
func (s *lazyStore) commit() {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	msgs, b := s.pending, s.batch
	s.pending, s.batch = nil, &lazyCommit{s: s, done: make(chan struct{})}
	s.mu.Unlock()
	s.apply(msgs, nil)
	close(b.done)
}

func (s *lazyStore) Forget([]broker.ForgetOp) {}
func (s *lazyStore) Close() error             { return nil }

func (s *lazyStore) maxPending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxPend
}

// TestStreamInflightBound: a publish stream of QoS 0 frames never has more
// than Limits.StreamInflight of them accepted but not stored, however slow
// the store (without the bound the broker queued all of them: a QoS 0
// publish returns once queued for the next commit).
func TestStreamInflightBound(t *testing.T) {
	st := &lazyStore{}
	const limit, frames = 8, 200
	b := brokertest.Start(t, nil, &broker.Options{Store: st, Limits: broker.Limits{StreamInflight: limit}})
	c := newClient(t, b, nil)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/publish", pr)
	req.Header.Set("Content-Type", wire.ContentType)
	go func() {
		var buf []byte
		for i := range frames {
			buf = wire.AppendPublish(buf[:0], &wire.Publish{ID: uint64(i + 1), Topic: "inflight/x", Payload: []byte("p")})
			if _, err := pw.Write(buf); err != nil {
				return
			}
		}
		// A QoS 1 frame last: its ack says every frame before it was handled.
		buf = wire.AppendPublish(buf[:0], &wire.Publish{ID: frames + 1, Flags: wire.PubQoS1, Topic: "inflight/x", Payload: []byte("end")})
		_, _ = pw.Write(buf)
		pw.Close()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := c.c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a, err := wire.NewDecoder(resp.Body, 0).Ack()
	if err != nil || a.ID != frames+1 || a.Status != 0 {
		t.Fatalf("ack %+v %v", a, err)
	}
	if m := st.maxPending(); m > limit {
		t.Fatalf("%d QoS 0 frames were waiting for the store at once, limit %d", m, limit)
	}
	if w := b.Stats().StreamInflightWaits; w < frames/limit {
		t.Fatalf("StreamInflightWaits = %d, want >= %d", w, frames/limit)
	}
}
