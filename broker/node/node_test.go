package node_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/node"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// loopbackConfig is a node on loopback ports of its own: HTTP/3 and MQTT
// over TCP, open to everyone, with the test PKI's certificate given as
// files (dir).
func loopbackConfig(t *testing.T, pki *testutil.PKI) node.Config {
	t.Helper()
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "srv.pem"), filepath.Join(dir, "srv-key.pem")
	if err := os.WriteFile(crt, pki.Server.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pki.Server.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return node.Config{
		HTTP:   node.HTTP{Listen: "127.0.0.1:0"},
		MQTT:   node.MQTT{TCPAddr: "127.0.0.1:0"},
		TLS:    node.TLS{CertFile: crt, KeyFile: key},
		Auth:   auth.Open(),
		Logger: testutil.DiscardLogger(),
	}
}

// startNode starts a node of c and closes it when the test ends.
func startNode(t *testing.T, c node.Config) *node.Node {
	t.Helper()
	n, err := node.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

// mqttConnect connects an MQTT 5 client over TCP to addr.
func mqttConnect(t *testing.T, ctx context.Context, addr string, got chan<- *paho.Publish) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil },
	}})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "node-test", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

// TestNodeHTTP3AndMQTT starts a node in-process and carries messages both
// ways between HTTP/3 and MQTT over TCP: one topic space.
func TestNodeHTTP3AndMQTT(t *testing.T) {
	pki := testutil.NewPKI(t)
	n := startNode(t, loopbackConfig(t, pki))
	a := n.Addrs()
	if a.HTTP3 == nil || a.MQTTTCP == "" || a.MQTTQUIC != nil || a.Metrics != nil {
		t.Fatalf("addresses %+v: want HTTP/3 and MQTT/TCP only", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan *paho.Publish, 4)
	mc := mqttConnect(t, ctx, a.MQTTTCP, got)
	if _, err := mc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "up/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	hc := testutil.H3Client(pki.Pool(), nil)
	base := "https://" + a.HTTP3.String()

	// HTTP/3 to MQTT.
	resp, err := hc.Post(base+"/v1/topics/up/t1", "text/plain", strings.NewReader("21.5"))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("publish over HTTP/3: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case m := <-got:
		if m.Topic != "up/t1" || string(m.Payload) != "21.5" {
			t.Fatalf("MQTT got %s %q", m.Topic, m.Payload)
		}
	case <-ctx.Done():
		t.Fatal("the HTTP/3 publish never reached the MQTT subscriber")
	}

	// MQTT to HTTP/3.
	sub, err := hc.Get(base + "/v1/topics/down/valve")
	if err != nil || sub.StatusCode != http.StatusOK {
		t.Fatalf("subscribe over HTTP/3: %v %v", sub, err)
	}
	defer sub.Body.Close()
	if _, err := mc.Publish(ctx, &paho.Publish{QoS: 1, Topic: "down/valve", Payload: []byte("open")}); err != nil {
		t.Fatal(err)
	}
	f, err := wire.NewDecoder(sub.Body, 0).Frame()
	if err != nil || string(f.Payload) != "open" {
		t.Fatalf("HTTP/3 subscriber got %+v, %v", f, err)
	}
}

// TestNodeLoadsCertificateOnce: New loads the certificate; the files may
// be gone when the listeners start, and HTTP/3 and MQTT over TLS present
// the same certificate.
func TestNodeLoadsCertificateOnce(t *testing.T) {
	pki := testutil.NewPKI(t)
	c := loopbackConfig(t, pki)
	c.MQTT = node.MQTT{TLSAddr: "127.0.0.1:0"}
	n, err := node.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c.TLS.CertFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c.TLS.KeyFile); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	conn, err := tls.Dial("tcp", n.Addrs().MQTTTLS, &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !bytes.Equal(conn.ConnectionState().PeerCertificates[0].Raw, pki.Server.TLS.Certificate[0]) {
		t.Error("MQTT over TLS presents another certificate")
	}
	testutil.WaitReady(t, "https://"+n.Addrs().HTTP3.String(), pki.Pool())
}

// TestRun: Run serves until its context ends, calls OnReady once it
// serves and OnStopping when the shutdown begins, then returns nil.
func TestRun(t *testing.T) {
	pki := testutil.NewPKI(t)
	c := loopbackConfig(t, pki)
	c.Metrics = node.Metrics{Listen: "127.0.0.1:0", Trace: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan node.Addrs, 1)
	stopping := make(chan struct{})
	c.OnReady = func(n *node.Node) { ready <- n.Addrs() }
	c.OnStopping = func() { close(stopping) }
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, c) }()
	var a node.Addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	}
	resp, err := http.Get("http://" + a.Metrics.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"quiot_broker_subscriptions 0", "quiot_quic_pto_total", "quiot_mqtt_clients 0"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-stopping:
	default:
		t.Error("OnStopping not called")
	}
	// Everything is closed: the ports are free again.
	for _, addr := range []string{a.HTTPTCP.String(), a.MQTTTCP, a.Metrics.String()} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still taken after Run: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

// TestStartFailureClosesWhatStarted: a listener that cannot start fails
// Start with an error naming the part, and the parts started before it
// are closed again (their ports are free).
func TestStartFailureClosesWhatStarted(t *testing.T) {
	pki := testutil.NewPKI(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c := loopbackConfig(t, pki)
	c.MQTT.TCPAddr = taken.Addr().String()
	n, err := node.New(c)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "mqtt: ") {
		t.Fatalf("Start: %v, want an error of the mqtt part", err)
	}
	a := n.Addrs()
	if a.HTTP3 == nil {
		t.Fatal("the broker had not started before MQTT")
	}
	pc, err := net.ListenPacket("udp", a.HTTP3.String())
	if err != nil {
		t.Fatalf("HTTP/3 port still taken after the failed start: %v", err)
	}
	pc.Close()
}

// TestConfigErrorsNameTheField: New refuses a bad Config with a
// *FieldError naming the field.
func TestConfigErrorsNameTheField(t *testing.T) {
	pki := testutil.NewPKI(t)
	for _, tc := range []struct {
		name  string
		edit  func(c *node.Config)
		field string
	}{
		{"no certificate", func(c *node.Config) { c.TLS = node.TLS{} }, "TLS"},
		{"key without cert", func(c *node.Config) { c.TLS = node.TLS{KeyFile: "k.pem"} }, "TLS"},
		{"bad listen", func(c *node.Config) { c.HTTP.Listen = "nohost:port:x" }, "HTTP.Listen"},
		{"bad metrics", func(c *node.Config) { c.Metrics.Listen = "nohost:port:x" }, "Metrics.Listen"},
		{"cluster credentials without URLs", func(c *node.Config) { c.Cluster.Token = "x" }, "Cluster.URLs"},
		{"negative cluster number", func(c *node.Config) { c.Cluster = node.Cluster{URLs: "nats://a:4222", HoldMessages: -1} }, "Cluster"},
		{"data directory on a file", func(c *node.Config) { c.DataDir = c.TLS.CertFile }, "DataDir"},
		{"inbound bridge without ACL", func(c *node.Config) {
			c.Auth = nil
			c.Bridges = []bridge.Config{{Name: "up", URL: "mqtt://h", Out: []string{"a/#"}}, {Name: "cloud", URL: "mqtt://h", In: []string{"cmd/#"}}}
		}, "Bridges[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loopbackConfig(t, pki)
			tc.edit(&c)
			n, err := node.New(c)
			var fe *node.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				if n != nil {
					_ = n.Close(context.Background())
				}
				t.Fatalf("New: %v, want a FieldError of %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field+": ") {
				t.Errorf("%q does not name %s", err, tc.field)
			}
		})
	}
	// A certificate that does not load names its file.
	c := loopbackConfig(t, pki)
	c.TLS.CertFile = filepath.Join(t.TempDir(), "no.crt")
	if _, err := node.New(c); err == nil || !strings.Contains(err.Error(), "no.crt") {
		t.Errorf("New with a missing certificate: %v", err)
	}
}

// TestCheck: Check opens and reads the data directory, and refuses what
// New refuses.
func TestCheck(t *testing.T) {
	pki := testutil.NewPKI(t)
	c := loopbackConfig(t, pki)
	c.DataDir = t.TempDir()
	if err := node.Check(c); err != nil {
		t.Fatal(err)
	}
	c.Metrics.Listen = "nohost:port:x"
	if err := node.Check(c); err == nil || !strings.Contains(err.Error(), "Metrics.Listen") {
		t.Fatalf("Check: %v", err)
	}
}

// TestNodesSideBySide: two nodes in one process share nothing.
func TestNodesSideBySide(t *testing.T) {
	pki := testutil.NewPKI(t)
	var ns [2]*node.Node
	for i := range ns {
		c := loopbackConfig(t, pki)
		c.DataDir = t.TempDir()
		ns[i] = startNode(t, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan *paho.Publish, 4)
	mc := mqttConnect(t, ctx, ns[1].Addrs().MQTTTCP, got)
	if _, err := mc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	hc := testutil.H3Client(pki.Pool(), nil)
	for i, n := range ns {
		resp, err := hc.Post("https://"+n.Addrs().HTTP3.String()+"/v1/topics/n", "text/plain", strings.NewReader(fmt.Sprint(i)))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("publish on node %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	select {
	case m := <-got:
		if string(m.Payload) != "1" {
			t.Fatalf("node 1's subscriber got node %s's message", m.Payload)
		}
	case <-ctx.Done():
		t.Fatal("no message on node 1")
	}
}
