package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// timeout only bounds a hang; nothing waits for it to pass.
const timeout = 45 * time.Second

// Every test of this package is parallel (t.Parallel): each starts its own
// NATS servers (random ports, its own storage) and brokers, and much of a
// test's time is spent waiting on NATS (JetStream elections, which take
// seconds when votes split, reconnects), which other tests can use.

// natsCluster is a NATS cluster with JetStream running in this process on
// loopback.
type natsCluster struct {
	t     testing.TB
	nodes []*server.Server
	ports []int // client ports
	opts  []*server.Options
}

// startNATS starts n clustered NATS servers with JetStream (storage in
// t.TempDir()) on 127.0.0.1 random ports and shuts them down at the end.
func startNATS(t testing.TB, n int) *natsCluster {
	t.Helper()
	// A route port picked ahead may be taken by another process before
	// its server binds it (that node never gets ready): try again with
	// other ports.
	for attempt := 1; ; attempt++ {
		c, err := tryStartNATS(t, n, 30*time.Second)
		if err == nil {
			return c
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("%v; starting the NATS cluster again", err)
	}
}

// tryStartNATS is one attempt of startNATS: it fails when a node is not
// ready within wait.
func tryStartNATS(t testing.TB, n int, wait time.Duration) (*natsCluster, error) {
	t.Helper()
	c := &natsCluster{t: t}
	// JetStream clustering needs configured routes on every node, so the
	// route ports are picked up front (free loopback ports, released just
	// before the servers take them).
	var ports []int
	var routes []string
	if n > 1 {
		var ls []net.Listener
		for range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
			ports = append(ports, l.Addr().(*net.TCPAddr).Port)
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[len(ports)-1]))
		}
		for _, l := range ls {
			_ = l.Close()
		}
	}
	for i := range n {
		o := &server.Options{
			ServerName:         fmt.Sprintf("n%d", i+1),
			Host:               "127.0.0.1",
			Port:               -1,
			NoLog:              true,
			NoSigs:             true,
			JetStream:          true,
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			StoreDir:           t.TempDir(),
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "quiot-test", Host: "127.0.0.1", Port: ports[i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		c.nodes = append(c.nodes, s)
		c.opts = append(c.opts, o)
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	for i, s := range c.nodes {
		if !s.ReadyForConnections(wait) {
			for _, s := range c.nodes {
				s.Shutdown()
			}
			return nil, fmt.Errorf("nats node %d not ready within %v", i+1, wait)
		}
		c.ports = append(c.ports, s.Addr().(*net.TCPAddr).Port)
	}
	if n > 1 {
		waitFor(t, func() bool {
			for _, s := range c.nodes {
				if s.JetStreamIsLeader() {
					return true
				}
			}
			return false
		}, "JetStream meta leader")
	}
	return c, nil
}

// urls returns the client URLs of the running nodes, comma-separated.
func (c *natsCluster) urls() string {
	var u []string
	for _, s := range c.nodes {
		if s.Running() {
			u = append(u, s.ClientURL())
		}
	}
	return strings.Join(u, ",")
}

// node is one clustered quiot broker with its link and an MQTT/TCP listener.
type node struct {
	t    testing.TB
	b    *brokertest.Broker
	link *cluster.Link
	mqtt *mqttquic.Server
	h3   *http.Client
}

// startNode starts a broker linked to urls (its first NATS URL is where it
// connects first).
func startNode(t testing.TB, pki *testutil.PKI, name, urls string, mod func(*broker.Options, *cluster.Options)) *node {
	t.Helper()
	co := cluster.Options{URLs: urls, Name: name, Replicas: 3, Logger: testutil.DiscardLogger(),
		ReconnectWait: 20 * time.Millisecond, MaxReconnectWait: 500 * time.Millisecond}
	bo := broker.Options{}
	if mod != nil {
		mod(&bo, &co)
	}
	l, err := cluster.New(co)
	if err != nil {
		t.Fatal(err)
	}
	bo.Cluster = l
	b := brokertest.Start(t, pki, &bo)
	if err := l.Start(b.Broker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	mq, err := mqttquic.New(mqttquic.Options{QUICAddr: "off", TCPAddr: "127.0.0.1:0", Broker: b.Broker, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := mq.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	h3 := testutil.H3Client(pki.Pool(), nil)
	t.Cleanup(func() { h3.Transport.(*http3.Transport).Close() })
	n := &node{t: t, b: b, link: l, mqtt: mq, h3: h3}
	n.waitConnected()
	return n
}

// waitConnected waits until the link has its stream and bucket.
func (n *node) waitConnected() {
	n.t.Helper()
	waitFor(n.t, func() bool {
		s := n.link.Stats()
		return s.Connected && (!n.b.Broker.Space().Sequenced() || s.Epoch != 0 && n.b.Broker.Epoch() == s.Epoch)
	}, "cluster link ready")
}

// waitFor polls cond (an observable state, not a time) until it holds; the
// bound only catches a hang.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of an event wait
	}
}

// publish POSTs one message over HTTP/3 and returns its sequence number.
func (n *node) publish(topic, payload, query string) uint64 {
	n.t.Helper()
	u := n.b.URL + "/v1/topics/" + url.PathEscape(topic)
	if query != "" {
		u += "?" + query
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(payload))
	resp, err := n.h3.Do(req)
	if err != nil {
		n.t.Fatalf("publish %s: %v", topic, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		n.t.Fatalf("publish %s: %d %s", topic, resp.StatusCode, body)
	}
	seq, _ := strconv.ParseUint(resp.Header.Get("Quiot-Seq"), 10, 64)
	return seq
}

// h3sub is an HTTP/3 subscription reading binary frames.
type h3sub struct {
	t      testing.TB
	frames chan wire.Frame
	cancel context.CancelFunc
	epoch  uint64
}

// subscribe GETs filter over HTTP/3 (query e.g. "since=5").
func (n *node) subscribe(filter, query string) *h3sub {
	n.t.Helper()
	u := n.b.URL + "/v1/topics/" + url.PathEscape(filter)
	if query != "" {
		u += "?" + query
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Quiot-Heartbeat", "1") // a quiet subscription outlives the QUIC idle timeout
	resp, err := n.h3.Do(req)
	if err != nil {
		cancel()
		n.t.Fatalf("subscribe %s: %v", filter, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		cancel()
		n.t.Fatalf("subscribe %s: %d %s", filter, resp.StatusCode, body)
	}
	epoch, _ := wire.ParseEpoch(resp.Header.Get("Quiot-Epoch"))
	s := &h3sub{t: n.t, frames: make(chan wire.Frame, 1<<16), cancel: cancel, epoch: epoch}
	go func() {
		defer close(s.frames)
		defer resp.Body.Close()
		dec := wire.NewDecoder(resp.Body, 0)
		for {
			f, err := dec.Frame()
			if err != nil {
				return
			}
			if f.IsHeartbeat() {
				continue
			}
			s.frames <- f
		}
	}()
	n.t.Cleanup(cancel)
	return s
}

// next returns the next frame; it fails the test on a hang.
func (s *h3sub) next() wire.Frame {
	s.t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			s.t.Fatal("subscription ended")
		}
		return f
	case <-time.After(timeout):
		s.t.Fatal("no frame within the timeout")
	}
	return wire.Frame{}
}

// nextMessage skips gap frames and returns the next message frame.
func (s *h3sub) nextMessage() wire.Frame {
	s.t.Helper()
	for {
		f := s.next()
		if !f.IsGap() {
			return f
		}
	}
}

// mqttClient is a paho MQTT 5 client on a node's MQTT/TCP listener.
type mqttClient struct {
	t   testing.TB
	c   *paho.Client
	got chan *paho.Publish
}

func (n *node) mqttConnect(id string) *mqttClient {
	n.t.Helper()
	conn, err := net.Dial("tcp", n.mqtt.TCPAddr())
	if err != nil {
		n.t.Fatal(err)
	}
	m := &mqttClient{t: n.t, got: make(chan *paho.Publish, 1<<14)}
	m.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			m.got <- pr.Packet
			return true, nil
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := m.c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil {
		n.t.Fatalf("mqtt connect: %v", err)
	}
	n.t.Cleanup(func() { _ = m.c.Disconnect(&paho.Disconnect{}) })
	return m
}

func (m *mqttClient) subscribe(filter string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := m.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		m.t.Fatalf("mqtt subscribe: %v", err)
	}
}

func (m *mqttClient) publish(topic, payload string, retain bool) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := m.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(payload), Retain: retain}); err != nil {
		m.t.Fatalf("mqtt publish: %v", err)
	}
}

func (m *mqttClient) next() *paho.Publish {
	m.t.Helper()
	select {
	case p := <-m.got:
		return p
	case <-time.After(timeout):
		m.t.Fatal("no MQTT message within the timeout")
	}
	return nil
}

// probe makes sure that a subscription's interest has reached the whole
// NATS cluster (NATS nodes learn of subscriptions on other nodes shortly
// after they are made): it publishes probe messages on topic from pub
// until recv reports one, then drains the probes. recv returns the
// payloads seen so far.
func probe(t testing.TB, pub *node, topic string, seen func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; !seen(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("interest in %s never reached the cluster", topic)
		}
		pub.publish(topic, "probe", "qos=1")
		time.Sleep(20 * time.Millisecond) // pacing of the probe publishes, not a synchronisation
	}
}

// restart starts node i again on its old client port with its old store
// (after Shutdown).
func (c *natsCluster) restart(i int) {
	c.t.Helper()
	o := c.opts[i].Clone()
	o.Port = c.ports[i]
	s, err := server.NewServer(o)
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(timeout) {
		c.t.Fatalf("nats node %d not ready after restart", i+1)
	}
	c.nodes[i] = s
	c.t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
}

// healthz returns the broker's /healthz body.
func (n *node) healthz() string {
	n.t.Helper()
	resp, err := n.h3.Get(n.b.URL + "/healthz")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
