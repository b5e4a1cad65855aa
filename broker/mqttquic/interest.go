package mqttquic

import (
	"strings"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// interestSink is implemented by a Core that forwards subscription interest
// to a federation link (*broker.Broker.AddInterest, broker/cluster).
type interestSink interface {
	AddInterest(filter string, delta int)
}

// interestHook reports MQTT subscriptions to the broker's federation link,
// so that a clustered broker asks the cluster for what its MQTT
// subscribers want. It counts each (client, filter) once: a repeated
// SUBSCRIBE or an UNSUBSCRIBE of a filter the client did not hold changes
// nothing.
type interestHook struct {
	mqtt.HookBase
	sink interestSink

	mu   sync.Mutex
	held map[string]map[string]bool // client ID -> filters
}

func newInterestHook(core Core) *interestHook {
	s, ok := core.(interestSink)
	if !ok {
		return nil
	}
	return &interestHook{sink: s, held: map[string]map[string]bool{}}
}

// ID names the hook.
func (h *interestHook) ID() string { return "quiot-cluster-interest" }

// Provides reports the events the hook handles.
func (h *interestHook) Provides(e byte) bool {
	return e == mqtt.OnSubscribed || e == mqtt.OnUnsubscribed
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

// OnSubscribed counts the filters a client now holds.
func (h *interestHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	if cl.Net.Inline {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, sub := range pk.Filters {
		if i < len(codes) && codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		f := interestFilter(sub.Filter)
		m := h.held[cl.ID]
		if m == nil {
			m = map[string]bool{}
			h.held[cl.ID] = m
		}
		if !m[f] {
			m[f] = true
			h.sink.AddInterest(f, 1)
		}
	}
}

// OnUnsubscribed releases the filters a client gave up (also when its
// session ends).
func (h *interestHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.held[cl.ID]
	for _, sub := range pk.Filters {
		f := interestFilter(sub.Filter)
		if m[f] {
			delete(m, f)
			h.sink.AddInterest(f, -1)
		}
	}
	if len(m) == 0 {
		delete(h.held, cl.ID)
	}
}
