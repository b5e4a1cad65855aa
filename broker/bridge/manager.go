package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/quiot/quiot/broker"
)

// Manager runs a broker's bridges and applies a new set of [[bridge]]
// tables (Reload, on SIGHUP): bridges whose table did not change keep
// running (their connection and queue untouched), removed ones stop,
// changed ones restart with the new table, added ones start. One tap on
// the broker serves all the bridges it ever runs.
type Manager struct {
	b   *broker.Broker
	log *slog.Logger

	mu      sync.Mutex // serialises Reload and Close
	tapOnce sync.Once
	closed  bool
	// running is read by the tap under the broker's lock: replaced, never
	// changed in place.
	running atomic.Pointer[[]*Bridge]
}

// NewManager returns a Manager of b's bridges; Reload starts them.
func NewManager(b *broker.Broker, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{b: b, log: log}
	m.running.Store(&[]*Bridge{})
	return m
}

// Bridges returns the running bridges, in the order of their tables.
func (m *Manager) Bridges() []*Bridge { return slices.Clone(*m.running.Load()) }

// tap hands an accepted message to every running bridge (each may hold
// its publisher's acknowledgement: Bridge.tap).
func (m *Manager) tap(msg *broker.Message, hold func(broker.Commit)) {
	for _, br := range *m.running.Load() {
		if len(br.cfg.Out) > 0 {
			br.tap(msg, hold)
		}
	}
}

// Reload makes the running bridges those of cfgs: unchanged ones keep
// running, removed ones are closed (within ctx), changed ones are closed
// and started again with their new table, new ones are started. A bridge
// that fails to start is logged and left out (a changed one keeps its old
// table when that starts again); the errors are returned joined.
func (m *Manager) Reload(ctx context.Context, cfgs []Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("bridges closed")
	}
	if len(cfgs) > 0 {
		m.tapOnce.Do(func() { m.b.AddHoldTap(m.tap) })
	}
	old := map[string]*Bridge{}
	for _, br := range *m.running.Load() {
		old[br.cfg.Name] = br
	}
	keep := map[string]bool{}
	for _, c := range cfgs {
		if br, ok := old[c.Name]; ok && reflect.DeepEqual(br.given, c) {
			keep[c.Name] = true
		}
	}
	// Stop the removed and changed bridges first: a changed one may keep
	// its store directory, which one bridge at a time may hold.
	for name, br := range old {
		if !keep[name] {
			m.remove(br)
			if err := br.Close(ctx); err != nil {
				m.log.Warn("bridge: closing for the reload", "bridge", name, "error", err)
			}
		}
	}
	var errs []error
	var next []*Bridge
	for _, c := range cfgs {
		if keep[c.Name] {
			next = append(next, old[c.Name])
			continue
		}
		br, err := m.start(c)
		if err != nil {
			errs = append(errs, err)
			if prev, ok := old[c.Name]; ok {
				m.log.Error("bridge: the changed table does not start; starting the previous one again", "bridge", c.Name, "error", err)
				if br, err = m.start(prev.given); err != nil {
					m.log.Error("bridge: the previous table does not start either", "bridge", c.Name, "error", err)
					continue
				}
			} else {
				continue
			}
		}
		next = append(next, br)
		what := "started"
		if _, ok := old[c.Name]; ok {
			what = "restarted with its new table"
		}
		m.log.Info("bridge "+what, "bridge", c.Name)
		cur := append(slices.Clone(*m.running.Load()), br) // the tap sees it at once
		m.running.Store(&cur)
	}
	m.running.Store(&next) // the tables' order
	return errors.Join(errs...)
}

// remove takes br off the running list (its tap stops at once).
func (m *Manager) remove(br *Bridge) {
	cur := *m.running.Load()
	next := make([]*Bridge, 0, len(cur))
	for _, x := range cur {
		if x != br {
			next = append(next, x)
		}
	}
	m.running.Store(&next)
}

func (m *Manager) start(c Config) (*Bridge, error) {
	br, err := New(m.b, c, m.log)
	if err != nil {
		return nil, err
	}
	br.managed = true
	if err := br.Start(); err != nil {
		_ = br.Close(context.Background()) // releases its store
		return nil, fmt.Errorf("bridge %s: %w", c.Name, err)
	}
	return br, nil
}

// Close closes every bridge (within ctx); the Manager runs no more.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	running := *m.running.Load()
	m.running.Store(&[]*Bridge{})
	var errs []error
	for _, br := range running {
		errs = append(errs, br.Close(ctx))
	}
	return errors.Join(errs...)
}
