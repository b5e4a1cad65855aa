package mqttquic

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestStartReturnsOnceWebSocketServes: mochi starts each listener's Serve
// on a goroutine of its own, and a WebSocket upgrade that came before the
// listener served was refused with 503 ("the MQTT server is starting"):
// an MQTT.js client connecting right after the broker started could meet
// it (TestWebSocketSessionTokenLimits did, once). Start returns only once
// every WebSocket listener serves, the one on the broker's port too:
// with their Serve held, Start has not returned; once they serve, an
// upgrade right after Start is served.
func TestStartReturnsOnceWebSocketServes(t *testing.T) {
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool()})
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	testHookWSServe = func() {
		entered <- struct{}{}
		<-release
	}
	t.Cleanup(func() { testHookWSServe = nil })
	s, err := New(Options{QUICAddr: "off", TLS: &tls.Config{Certificates: []tls.Certificate{p.Server.TLS}}, Logger: discard(),
		Broker: h3.Broker, WSAddr: "127.0.0.1:0", WSOnBroker: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	started := make(chan error, 1)
	go func() { started <- s.Start() }()
	<-entered
	<-entered
	// Start returned at once before (mochi's Serve had started the
	// goroutines); a second is only how long this test looks for it.
	select {
	case err := <-started:
		t.Fatalf("Start returned (%v) while its WebSocket listeners did not serve yet", err)
	case <-time.After(time.Second):
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	for _, transport := range []string{"ws", "broker"} {
		c, code := pathConnect(t, s, h3.Broker, p, transport, pathOpts{}, connectOpts{version: 5, id: "right-after-start-" + transport, clean: true})
		if code != 0 {
			t.Fatalf("%s: CONNACK 0x%02x right after Start", transport, code)
		}
		c.disconnect()
	}
}
