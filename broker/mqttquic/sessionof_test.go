package mqttquic

import (
	"fmt"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
)

// TestSessionOfFollowsIDs: the session state a client keeps with it
// (Client.HookState) answers as the table of sessions does, through
// replacement and removal.
func TestSessionOfFollowsIDs(t *testing.T) {
	h := testAuthHook(auth.Open())
	cl := &mqtt.Client{ID: "c"}
	newer := &mqtt.Client{ID: "c"} // a later connection of the same client id
	first := &identity{cl: cl, id: "alice"}
	second := &identity{cl: newer, id: "alice"}
	steps := []struct {
		name      string
		change    func()
		session   *identity // sessionOf(cl)
		ownerCl   *identity // owner(cl)
		ownerNewr *identity // owner(newer)
	}{
		{"none", func() {}, nil, nil, nil},
		{"claimed", func() { h.putLocked("c", first) }, first, first, nil},
		{"again", func() {}, first, first, nil},
		{"taken over", func() { h.putLocked("c", second) }, second, nil, second},
		{"dropped", func() { h.dropLocked("c", second) }, nil, nil, nil},
		{"claimed anew", func() { h.putLocked("c", first) }, first, first, nil},
	}
	for _, s := range steps {
		s.change()
		if got := h.sessionOf(cl); got != s.session {
			t.Errorf("%s: sessionOf = %p, want %p", s.name, got, s.session)
		}
		if got := h.owner(cl); got != s.ownerCl {
			t.Errorf("%s: owner(cl) = %p, want %p", s.name, got, s.ownerCl)
		}
		if got := h.owner(newer); got != s.ownerNewr {
			t.Errorf("%s: owner(newer) = %p, want %p", s.name, got, s.ownerNewr)
		}
	}
}

// BenchmarkDeliveryHooks is the auth hook's part of one QoS 1 delivery to
// one of 1000 sessions: the ACL check, the queue count, the PUBACK's
// uncount.
func BenchmarkDeliveryHooks(b *testing.B) {
	a, err := auth.Parse([]byte(aclFile))
	if err != nil {
		b.Fatal(err)
	}
	h := testAuthHook(a)
	cls := make([]*mqtt.Client, 1000)
	for i := range cls {
		cls[i] = &mqtt.Client{ID: fmt.Sprintf("c-%d", i)}
		h.putLocked(cls[i].ID, &identity{cl: cls[i], id: "alice"})
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/x", Payload: make([]byte, 110)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cl := cls[i%len(cls)]
		if !h.OnACLCheck(cl, "a/x", false) {
			b.Fatal("refused")
		}
		pk.PacketID = uint16(i)
		h.OnQosPublish(cl, pk, 0, 0)
		h.OnQosComplete(cl, pk)
	}
}
