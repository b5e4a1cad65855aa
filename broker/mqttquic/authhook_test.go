package mqttquic

import (
	"context"
	"testing"
	"unsafe"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
)

// aclCore is a Core with only an authenticator.
type aclCore struct{ a *auth.Authenticator }

func (c aclCore) Publish(context.Context, broker.Message) (uint64, error) { return 0, nil }
func (c aclCore) AddTap(func(*broker.Message))                            {}
func (c aclCore) Auth() *auth.Authenticator                               { return c.a }
func (c aclCore) ConnOpened(string)                                       {}
func (c aclCore) ConnClosed(string)                                       {}
func (c aclCore) CountOut(string, int)                                    {}

// testAuthHook is an auth hook without a server (no sweeper), with the
// default limits.
func testAuthHook(a *auth.Authenticator) *authHook {
	var l Limits
	l.ensureDefaults()
	return &authHook{core: aclCore{a}, mq: mqtt.New(nil), limits: l, log: discard(), perID: map[string]int{}}
}

// TestACLCheckCache: the per-session memory of the last decision answers
// exactly as the ACL does, whatever the order of topics and directions,
// and per session (identity).
func TestACLCheckCache(t *testing.T) {
	a, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	h := testAuthHook(a)
	alice := &mqtt.Client{ID: "c-alice"}
	anon := &mqtt.Client{ID: "c-anon"}
	h.putLocked(alice.ID, &identity{cl: alice, id: "alice"})
	h.putLocked(anon.ID, &identity{cl: anon, id: ""})
	steps := []struct {
		cl    *mqtt.Client
		topic string
		write bool
		want  bool
	}{
		{alice, "a/x", false, true},
		{alice, "a/x", false, true},
		{anon, "a/x", false, false},
		{anon, "a/x", false, false},
		{alice, "a/x", true, true},
		{anon, "a/x", true, false},
		{anon, "public/x", false, true},
		{anon, "a/x", false, false},
		{alice, "b/x", false, false},
		{alice, "b/x", false, false},
		{alice, "a/x", false, true},
		{alice, "$share/g/a/#", false, true},
		{anon, "$share/g/a/#", false, false},
		{&mqtt.Client{ID: "unknown"}, "public/x", false, false},
	}
	for i, s := range steps {
		if got := h.OnACLCheck(s.cl, s.topic, s.write); got != s.want {
			t.Errorf("step %d: OnACLCheck(%s, %q, write=%v) = %v, want %v", i, s.cl.ID, s.topic, s.write, got, s.want)
		}
	}
	// A new session of the same client id with another identity starts
	// without the old decisions.
	h.putLocked(alice.ID, &identity{cl: alice, id: ""})
	if h.OnACLCheck(alice, "a/x", false) {
		t.Error("decision of the previous identity reused")
	}
	// An open broker allows everything (no identity needed).
	ho := testAuthHook(auth.Open())
	ho.putLocked("x", &identity{id: ""})
	if !ho.OnACLCheck(&mqtt.Client{ID: "x"}, "any/topic", true) {
		t.Error("open broker refused")
	}
}

// TestIdentityFootprint: a session's identity lives as long as the
// session, so it stays within the allocator's 112-byte size class (96
// before its queueAcct held two messages without a map, which saved the
// map's 200 bytes).
func TestIdentityFootprint(t *testing.T) {
	if got := unsafe.Sizeof(identity{}); got > 112 {
		t.Errorf("identity is %d bytes, want at most 112", got)
	}
}
