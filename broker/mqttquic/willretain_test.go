package mqttquic

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestRetainedWillsBounded: a will with the retain flag passes the same
// retained-bytes bound (broker.Limits.RetainedBytes) as a retained
// PUBLISH: 300 retained wills of 1 KB against a 32 KiB bound leave at most
// 32 KiB retained, in the broker and in the MQTT server's own retained
// messages, and the wills beyond it are counted as refused. Before, every
// will stayed retained on the MQTT side (300 KB here).
func TestRetainedWillsBounded(t *testing.T) {
	const bound, wills = 32 << 10, 300
	a, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Auth: a, ClientCAs: p.Pool(), Limits: broker.Limits{RetainedBytes: bound}})
	core := &swapCore{Broker: h3.Broker}
	core.a.Store(a)
	s := startServer(t, p, func(o *Options) {
		o.Broker = core
		o.TCPAddr = "127.0.0.1:0"
	})
	payload := strings.Repeat("w", 1000)
	for i := range wills {
		c, code := connectRaw(t, s, p, "tcp", connectOpts{id: fmt.Sprintf("will-%d", i), clean: true,
			willTopic: fmt.Sprintf("public/will/%d", i), willPayload: payload, willRetain: true})
		if code != 0 {
			t.Fatalf("will %d: CONNACK 0x%02x", i, code)
		}
		_ = c.nc.Close() // no DISCONNECT: the will is sent
		waitForCond(t, func() bool { return sessionOffline(s, fmt.Sprintf("will-%d", i)) }, "the will's session to end")
	}
	// Each will reached the broker (accepted as retained, or refused).
	waitForCond(t, func() bool {
		return h3.Broker.Stats().Retained+int(s.br.Refused.Load()) >= wills
	}, "every will handed to the broker")
	var held int
	msgs := s.MQTT().Topics.Messages("public/will/#")
	for _, m := range msgs {
		held += len(m.Payload) + len(m.TopicName)
	}
	st := h3.Broker.Stats()
	t.Logf("broker: %d retained, %d bytes; MQTT server: %d retained, %d bytes; %d refused", st.Retained, st.RetainedBytes, len(msgs), held, s.br.Refused.Load())
	if held > bound || st.RetainedBytes > bound {
		t.Errorf("retained wills hold %d bytes on the MQTT side, %d in the broker; the bound is %d", held, st.RetainedBytes, bound)
	}
	if len(msgs) != st.Retained {
		t.Errorf("MQTT side retains %d wills, the broker %d", len(msgs), st.Retained)
	}
	if s.br.Refused.Load() == 0 {
		t.Error("no will refused")
	}
}
