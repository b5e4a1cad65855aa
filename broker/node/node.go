// Package node assembles one broker node from a Config: the HTTP/3 broker
// (and its TCP fallback), the MQTT listeners in the same topic space, the
// durable store, the cluster link, the bridges, the ACL's reloads and the
// Prometheus endpoint. `quiot broker` (device/cmd_broker*.go) maps its
// flags and configuration file to a Config and calls Run; tests start a
// Node in-process.
//
// New checks the Config and loads what it names (the certificate once, for
// every listener; the data directory; the cluster link) without listening;
// Start listens and starts every part in order; Close stops them in the
// reverse order, the broker last (its subscribers drain). Run is
// New+Start, a wait for its context, then Close. The package holds no
// global state: several nodes run side by side in one process.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/store"
	"github.com/quiot/quiot/internal/qmetrics"
)

// clusterLink is what the node needs of the cluster link
// (broker/cluster.Link; absent from the Pi build).
type clusterLink interface {
	broker.Federation
	Start(b *broker.Broker) error
	Close() error
	ID() string
	WritePrometheus(w io.Writer)
}

// Node is one running broker node. Make it with New.
type Node struct {
	c        Config // defaults applied
	log      *slog.Logger
	tls      TLS // loaded once (Config.TLS with Certificates and ClientCAs)
	store    *store.Store
	resetKey *quic.StatelessResetKey
	link     clusterLink

	counting qmetrics.CountingPacketConn // under HTTP/3 when Metrics.Listen is set
	tracer   *qmetrics.Tracer

	b       *broker.Broker
	mqtt    *mqttquic.Server
	bridges *bridge.Manager
	metrics net.Addr

	// stops undo the steps of Start, in start order; Close runs them
	// backwards.
	stops []func(context.Context) error
}

// Addrs are the addresses a started node listens on; nil or empty for a
// listener that is off.
type Addrs struct {
	// HTTP3 is the UDP address of HTTP/3; HTTPTCP the TCP address of
	// HTTP/1.1 and HTTP/2 (and MQTT over WebSocket with MQTT.WSOnBroker).
	HTTP3, HTTPTCP net.Addr
	// MQTTQUIC is the UDP address of MQTT over QUIC.
	MQTTQUIC net.Addr
	// MQTTTCP, MQTTTLS, MQTTWS and MQTTWSS are the TCP addresses of MQTT,
	// MQTT over TLS, over WebSocket and over secure WebSocket.
	MQTTTCP, MQTTTLS, MQTTWS, MQTTWSS string
	// Metrics is the TCP address of GET /metrics.
	Metrics net.Addr
}

// New checks c and loads what it names without listening: the TLS
// certificate and client CA (once, for every listener), the store on
// DataDir, the cluster link (not yet connected). Invalid values are
// *FieldError naming the field.
func New(c Config) (*Node, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	n := &Node{c: c, log: c.Logger}
	var err error
	if n.tls, err = c.loadTLS(); err != nil {
		return nil, err
	}
	if c.Metrics.Listen != "" && c.Metrics.Trace {
		n.tracer = qmetrics.NewTracer(nil)
	}
	if n.link, err = newLink(c.Cluster, n.log); err != nil {
		return nil, err
	}
	if c.DataDir != "" {
		if n.store, err = store.Open(store.Options{Dir: c.DataDir, Logger: n.log}); err != nil {
			n.closeUnstarted()
			return nil, &FieldError{Field: "DataDir", Err: fmt.Errorf("%s: %w", c.DataDir, err)}
		}
		if n.resetKey, err = store.ResetKey(c.DataDir); err != nil {
			n.closeUnstarted()
			return nil, &FieldError{Field: "DataDir", Err: fmt.Errorf("%s: %w", c.DataDir, err)}
		}
	}
	return n, nil
}

// closeUnstarted releases what New opened, for a node that never started.
func (n *Node) closeUnstarted() {
	if n.store != nil {
		_ = n.store.Close()
		n.store = nil
	}
	if n.link != nil {
		_ = n.link.Close()
		n.link = nil
	}
}

// Check checks c as Run would start it, without listening: the values,
// the certificate and client CA, the browser options, the cluster options
// and the data directory's state (opened and read as at start; nothing of
// it is loaded into a broker).
func Check(c Config) error {
	dataDir := c.DataDir
	c.DataDir = ""
	n, err := New(c)
	if err != nil {
		return err
	}
	defer n.closeUnstarted()
	if _, err := broker.New(n.brokerOptions()); err != nil {
		return err
	}
	if dataDir == "" {
		return nil
	}
	st, err := store.Open(store.Options{Dir: dataDir, Logger: n.log})
	if err == nil {
		_, err = st.Load()
		if cerr := st.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return &FieldError{Field: "DataDir", Err: fmt.Errorf("%s: %w", dataDir, err)}
	}
	return nil
}

// brokerOptions are the HTTP broker's options: the certificate, QUIC
// configuration, store and cluster link the node made.
func (n *Node) brokerOptions() *broker.Options {
	c := n.c
	o := &broker.Options{
		Listen: c.HTTP.Listen, DisableTCP: c.HTTP.DisableTCP,
		Certificates: n.tls.Certificates, ClientCAs: n.tls.ClientCAs,
		Tuning: c.Tuning, Auth: c.Auth, Limits: c.HTTP.Limits,
		ShutdownGrace: c.ShutdownGrace, Heartbeat: c.HTTP.Heartbeat,
		StatelessResetKey: n.resetKey, Web: c.HTTP.Web, Logger: n.log,
	}
	if n.tracer != nil {
		o.Tracer = n.tracer.ConnectionTracer
	}
	if n.store != nil {
		o.Store = n.store
	}
	if n.link != nil {
		o.Cluster = n.link
	}
	return o
}

// Start listens and starts every part: the HTTP broker, the bridges, the
// reloads (ACL and bridges), the cluster link, the MQTT listeners and the
// metrics endpoint, in this order. ctx bounds the bridges and the
// reloads; stop the node with Close. When a part fails, what started is
// closed again and the error names the part.
func (n *Node) Start(ctx context.Context) error {
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"broker", n.startBroker},
		{"bridges", n.startBridges},
		{"reload", n.startReload}, // after the bridges: it reloads them
		{"cluster", n.startCluster},
		{"mqtt", n.startMQTT},
		{"metrics", n.startMetrics},
	}
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			err = fmt.Errorf("%s: %w", s.name, err)
			sctx, cancel := context.WithTimeout(context.Background(), n.c.ShutdownGrace)
			defer cancel()
			return errors.Join(err, n.Close(sctx))
		}
	}
	return nil
}

// startBroker makes the HTTP broker and listens. With metrics on, its UDP
// socket counts bytes and datagrams.
func (n *Node) startBroker(context.Context) error {
	o := n.brokerOptions()
	if n.c.Metrics.Listen != "" {
		// The TCP listener of the same port is opened with the socket, as
		// the broker does for its own: with port 0 a number free on UDP
		// may be taken on TCP, and the pair is then tried again.
		udp, tln, err := broker.ListenPair(n.c.HTTP.Listen, !n.c.HTTP.DisableTCP)
		if err != nil {
			return err
		}
		n.counting = qmetrics.NewCountingPacketConn(udp)
		o.PacketConn, o.TCPListener = n.counting, tln
	}
	b, err := broker.New(o)
	if err == nil {
		if err = b.Start(); err != nil {
			_ = b.Close() // closes the store
			n.store = nil
		}
	}
	if err != nil {
		if n.counting != nil {
			_ = n.counting.Close()
		}
		if o.TCPListener != nil {
			_ = o.TCPListener.Close()
		}
		return err // Close releases the link (and the store if New failed)
	}
	n.b = b
	n.stops = append(n.stops, n.stopBroker)
	return nil
}

// stopBroker shuts the HTTP broker down (its subscribers drain within
// ctx), then closes the socket it was given, and logs its counters.
func (n *Node) stopBroker(ctx context.Context) error {
	err := n.b.Shutdown(ctx)
	if n.counting != nil {
		_ = n.counting.Close()
	}
	st := n.b.Stats()
	var parts []string
	for _, p := range st.ProtocolNames() {
		ps := st.Protocols[p]
		parts = append(parts, fmt.Sprintf("%s in=%d out=%d conns=%d", p, ps.MessagesIn, ps.MessagesOut, ps.ConnsTotal))
	}
	n.log.Info("broker stopped", "protocols", strings.Join(parts, "; "), "dropped", st.Dropped, "cut_off", st.CutOff)
	return err
}

// startCluster connects the cluster link (in the background when NATS is
// unreachable).
func (n *Node) startCluster(context.Context) error {
	if n.link == nil {
		return nil
	}
	if err := n.link.Start(n.b); err != nil {
		_ = n.link.Close()
		return err
	}
	n.log.Info("cluster link started", "nats", n.c.Cluster.URLs, "id", n.link.ID())
	n.stops = append(n.stops, func(context.Context) error { return n.link.Close() })
	return nil
}

// startMQTT starts the MQTT listeners with the node's certificate.
func (n *Node) startMQTT(context.Context) error {
	m := n.c.MQTT
	if !m.on() {
		return nil
	}
	o := mqttquic.Options{QUICAddr: m.QUICAddr, TCPAddr: m.TCPAddr, TLSAddr: m.TLSAddr, WSAddr: m.WSAddr, WSSAddr: m.WSSAddr,
		WSOnBroker: m.WSOnBroker, Broker: n.b, Tuning: n.c.Tuning, Logger: n.log, Limits: m.Limits, DataDir: n.c.DataDir}
	if n.c.HTTP.Web != nil {
		o.CORSOrigins = n.c.HTTP.Web.CORSOrigins // the same origins as the HTTP side
	}
	if o.Limits.QUICRetryAbove == 0 {
		// One --quic-retry-above for both QUIC listeners (docs/security.md).
		o.Limits.QUICRetryAbove = n.c.HTTP.Limits.QUICRetryAbove
	}
	if o.QUICAddr == "" {
		o.QUICAddr = "off"
	}
	if m.QUICAddr != "" || m.TLSAddr != "" || m.WSSAddr != "" {
		o.TLS = &tls.Config{Certificates: n.tls.Certificates}
		o.ClientCAs = n.tls.ClientCAs
	}
	s, err := mqttquic.New(o)
	if err == nil {
		err = s.Start()
	}
	if err != nil {
		return err
	}
	n.mqtt = s
	n.stops = append(n.stops, func(context.Context) error { return s.Close() })
	return nil
}

// Addrs returns the addresses the started node listens on.
func (n *Node) Addrs() Addrs {
	var a Addrs
	if n.b != nil {
		a.HTTP3, a.HTTPTCP = n.b.Addr(), n.b.TCPAddr()
	}
	if s := n.mqtt; s != nil {
		a.MQTTQUIC, a.MQTTTCP, a.MQTTTLS, a.MQTTWS, a.MQTTWSS = s.QUICAddr(), s.TCPAddr(), s.TLSAddr(), s.WSAddr(), s.WSSAddr()
	}
	a.Metrics = n.metrics
	return a
}

// Broker returns the HTTP broker of a started node (its topic space is
// the node's: Publish, Subscribe, Stats).
func (n *Node) Broker() *broker.Broker { return n.b }

// ClusterID returns this broker's name in the cluster ("" without one).
func (n *Node) ClusterID() string {
	if n.link == nil {
		return ""
	}
	return n.link.ID()
}

// Done is closed when the started node's broker begins to stop, by Close
// or by itself.
func (n *Node) Done() <-chan struct{} { return n.b.Done() }

// Close stops what Start started, in the reverse order: the metrics
// endpoint, the MQTT listeners, the cluster link, the reloads, the
// bridges, and last the HTTP broker, whose subscribers drain within ctx.
// On a node that did not start, it releases what New opened.
func (n *Node) Close(ctx context.Context) error {
	var errs []error
	for i := len(n.stops) - 1; i >= 0; i-- {
		if err := n.stops[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	n.stops = nil
	if n.b == nil {
		n.closeUnstarted() // New's store and link, never handed over
	}
	return errors.Join(errs...)
}

// Run runs a node of c until ctx ends, then shuts it down cleanly within
// c.ShutdownGrace, in the reverse order of its start. It returns early
// when the broker stops by itself. c.OnReady and c.OnStopping, when set,
// are called once it serves and when the shutdown begins.
func Run(ctx context.Context, c Config) error {
	n, err := New(c)
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	if n.c.OnReady != nil {
		n.c.OnReady(n)
	}
	select {
	case <-ctx.Done():
		n.log.Info("shutting down", "grace", n.c.ShutdownGrace)
	case <-n.Done():
	}
	if n.c.OnStopping != nil {
		n.c.OnStopping()
	}
	sctx, cancel := context.WithTimeout(context.Background(), n.c.ShutdownGrace)
	defer cancel()
	return n.Close(sctx)
}
