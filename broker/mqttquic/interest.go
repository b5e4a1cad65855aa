package mqttquic

import (
	"slices"
	"strings"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/space"
)

// spaceOf returns the topic space behind core (a *broker.Broker's), or nil
// for a Core without one (tests' fakes).
func spaceOf(core Core) *space.Space {
	if c, ok := core.(interface{ Space() *space.Space }); ok {
		return c.Space()
	}
	return nil
}

// interestSink forwards subscription interest to a federation link
// (broker/cluster): the topic space behind a Core (*space.Space.AddInterest),
// or a Core that implements it.
type interestSink interface {
	AddInterest(filter string, delta int)
	// CoverInterest returns once a sequencing cluster link reads filter's
	// messages (*space.Space.CoverInterest); release ends that interest.
	CoverInterest(filter string) (release func())
	// Covering reports whether CoverInterest has anything to wait for.
	Covering() bool
}

// interestHook reports MQTT subscriptions to the broker's federation link,
// so that a clustered broker asks the cluster for what its MQTT
// subscribers want. It counts each (client, filter) once: a repeated
// SUBSCRIBE or an UNSUBSCRIBE of a filter the client did not hold changes
// nothing. A new filter is covered before mochi answers the SUBSCRIBE
// (OnSubscribe blocks until the link reads it, as an HTTP/3 subscription
// waits before its response), so that every message the cluster numbers
// after the SUBACK reaches the subscriber.
type interestHook struct {
	mqtt.HookBase
	sink interestSink
	// allowed, when set, says whether a client may subscribe to a filter:
	// only valid filters it may subscribe to are covered (a refused one
	// would make the link read it for nothing).
	allowed func(cl *mqtt.Client, filter string) bool

	mu      sync.Mutex
	held    map[string]filterSet      // client ID -> filters
	covered map[*mqtt.Client][]func() // releases of covers taken in OnSubscribe
}

func newInterestHook(core Core) *interestHook {
	var s interestSink
	if sp := spaceOf(core); sp != nil {
		s = sp
	} else if c, ok := core.(interestSink); ok {
		s = c
	} else {
		return nil
	}
	return &interestHook{sink: s, held: map[string]filterSet{}, covered: map[*mqtt.Client][]func(){}}
}

// ID names the hook.
func (h *interestHook) ID() string { return "quiot-cluster-interest" }

// Provides reports the events the hook handles.
func (h *interestHook) Provides(e byte) bool {
	return e == mqtt.OnSubscribe || e == mqtt.OnSubscribed || e == mqtt.OnUnsubscribed || e == mqtt.OnDisconnect
}

// interestFilter is the topic filter behind an MQTT 5 shared subscription
// ($share/group/filter), or f itself.
func interestFilter(f string) string {
	if rest, ok := strings.CutPrefix(f, "$share/"); ok {
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			return rest[i+1:]
		}
	}
	return f
}

// OnSubscribe covers the filters of a SUBSCRIBE that the client does not
// hold yet before mochi answers it; the covers are released in
// OnSubscribed, once the subscriptions' own interest is counted (or in
// OnDisconnect when the SUBACK could not be written).
func (h *interestHook) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline || !h.sink.Covering() {
		return pk
	}
	var fresh []string
	h.mu.Lock()
	for _, sub := range pk.Filters {
		if !mqtt.IsValidFilter(sub.Filter, false) {
			continue // mochi refuses it
		}
		if f := interestFilter(sub.Filter); !h.held[cl.ID].has(f) && !slices.Contains(fresh, f) {
			fresh = append(fresh, f)
		}
	}
	h.mu.Unlock()
	fresh = slices.DeleteFunc(fresh, func(f string) bool { return h.allowed != nil && !h.allowed(cl, f) })
	// Not under h.mu: a cover waits for the cluster (bounded by the link's
	// ack timeout; at once when NATS is unreachable).
	var rels []func()
	for _, f := range fresh {
		rels = append(rels, h.sink.CoverInterest(f))
	}
	if len(rels) > 0 {
		h.mu.Lock()
		h.covered[cl] = append(h.covered[cl], rels...)
		h.mu.Unlock()
	}
	return pk
}

// releaseCovers ends the covers OnSubscribe took for cl.
func (h *interestHook) releaseCovers(cl *mqtt.Client) {
	h.mu.Lock()
	rels := h.covered[cl]
	delete(h.covered, cl)
	h.mu.Unlock()
	for _, rel := range rels {
		rel()
	}
}

// OnDisconnect releases covers whose SUBSCRIBE was never answered.
func (h *interestHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.releaseCovers(cl)
}

// OnSubscribed counts the filters a client now holds, then releases the
// covers OnSubscribe took (the link keeps reading a filter while its
// count stays above zero).
func (h *interestHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	if cl.Net.Inline {
		return
	}
	defer h.releaseCovers(cl) // after h.mu is released: it takes it
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, sub := range pk.Filters {
		if i < len(codes) && codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		f := interestFilter(sub.Filter)
		if m := h.held[cl.ID]; !m.has(f) {
			h.held[cl.ID] = m.add(f)
			h.sink.AddInterest(f, 1)
		}
	}
}

// OnUnsubscribed releases the filters a client gave up (also when its
// session ends).
func (h *interestHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.held[cl.ID]
	if !ok {
		return
	}
	for _, sub := range pk.Filters {
		f := interestFilter(sub.Filter)
		if m.has(f) {
			m = m.remove(f)
			h.sink.AddInterest(f, -1)
		}
	}
	if m.len() == 0 {
		delete(h.held, cl.ID)
	} else {
		h.held[cl.ID] = m
	}
}

// filterSetFew is the most filters a filterSet holds in a slice.
const filterSetFew = 16

// filterSet is the filters one client holds: a slice while they are few
// (an idle subscriber's one filter costs a string header, where a map of
// one cost about 200 bytes), a map beyond filterSetFew. Its methods that
// change it return the set to store.
type filterSet struct {
	few  []string
	many map[string]struct{}
}

// has reports whether f is in the set.
func (s filterSet) has(f string) bool {
	if s.many != nil {
		_, ok := s.many[f]
		return ok
	}
	return slices.Contains(s.few, f)
}

// add returns the set with f added; f is not in it.
func (s filterSet) add(f string) filterSet {
	if s.many == nil && len(s.few) < filterSetFew {
		s.few = append(s.few, f)
		return s
	}
	if s.many == nil {
		s.many = make(map[string]struct{}, 2*filterSetFew)
		for _, g := range s.few {
			s.many[g] = struct{}{}
		}
		s.few = nil
	}
	s.many[f] = struct{}{}
	return s
}

// remove returns the set without f; f is in it.
func (s filterSet) remove(f string) filterSet {
	if s.many != nil {
		delete(s.many, f)
		return s
	}
	i := slices.Index(s.few, f)
	s.few = slices.Delete(s.few, i, i+1)
	return s
}

// len is the number of filters in the set.
func (s filterSet) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}
