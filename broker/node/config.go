package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
)

// Config is everything one broker node runs. The zero value is not
// enough: TLS needs a certificate. Every other zero field means its
// documented default.
type Config struct {
	// HTTP is the HTTP side: HTTP/3 on UDP and HTTP/1.1+HTTP/2 on TCP.
	HTTP HTTP
	// MQTT are the MQTT listeners, in the HTTP side's topic space with its
	// identities and ACL; the zero value has none.
	MQTT MQTT
	// TLS is the server certificate, loaded once by New and used by
	// HTTP/3, its TCP fallback, MQTT over QUIC, MQTT over TLS and MQTT over
	// secure WebSocket. Required.
	TLS TLS
	// Tuning is the QUIC/TLS profile of every QUIC listener; nil means
	// quictune.Default().
	Tuning *quictune.Profile
	// Auth holds identities and the ACL; nil means no ACL: loopback
	// clients only (auth.LoopbackOnly). auth.Open() serves everyone. A
	// credential's expiry and Reload refresh it while the node runs.
	Auth *auth.Authenticator
	// DataDir, when set, keeps retained messages, resume history, the
	// epoch and sequence counter (DataDir/broker.db) and persistent MQTT
	// sessions (DataDir/mqtt-sessions.db) across restarts (broker/store);
	// empty means memory only.
	DataDir string
	// Cluster joins other brokers through NATS (broker/cluster,
	// docs/cluster.md); the zero value (no URLs) means this broker alone.
	Cluster Cluster
	// Metrics is the Prometheus endpoint; the zero value has none.
	Metrics Metrics
	// Bridges are the bridges to upstream MQTT brokers (docs/bridge.md);
	// each is checked against Auth by New.
	Bridges []bridge.Config
	// BridgeFile, when set, is the configuration file Bridges came from:
	// Reload reads its [[bridge]] tables again (bridge.LoadFile).
	BridgeFile string
	// Reload delivers SIGHUP (the caller's signal.Notify channel): each
	// value received reloads Auth's ACL file (connections whose rights it
	// removed are closed) and the bridge tables of BridgeFile (unchanged
	// bridges keep running). A file with an error changes nothing and is
	// logged. Nil means no reloads.
	Reload <-chan os.Signal
	// ShutdownGrace bounds Run's shutdown (subscribers draining); zero
	// means 5 s.
	ShutdownGrace time.Duration
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
	// OnReady, when set, is called by Run once every listener serves, with
	// the node (Addrs): the command prints the addresses and tells systemd.
	OnReady func(n *Node)
	// OnStopping, when set, is called by Run when the shutdown begins.
	OnStopping func()
}

// HTTP configures the HTTP side (broker.Broker).
type HTTP struct {
	// Listen is the UDP (HTTP/3) and TCP (HTTP/1.1, HTTP/2) address; empty
	// means ":4433".
	Listen string
	// DisableTCP turns off the HTTP/1.1+HTTP/2 listener on TCP.
	DisableTCP bool
	// Limits bound what clients can make the broker hold; each zero field
	// is broker.Limits' default. MaxTopicLength and MaxTopicLevels apply
	// to MQTT too, and so does QUICRetryAbove to MQTT over QUIC unless
	// MQTT.Limits.QUICRetryAbove is set.
	Limits broker.Limits
	// Web is the browser part (CORS, session tokens, dashboard); nil means
	// none of it. Its CORSOrigins also apply to MQTT over WebSocket.
	Web *web.Options
	// Heartbeat is broker.Options.Heartbeat: zero means 15 s.
	Heartbeat time.Duration
}

// MQTT configures the MQTT listeners (broker/mqttquic). Each empty address
// is a listener that is off.
type MQTT struct {
	// QUICAddr is the UDP address of MQTT over QUIC (ALPN "mqtt").
	QUICAddr string
	// TCPAddr is the address of plain MQTT (passwords in clear).
	TCPAddr string
	// TLSAddr is the address of MQTT over TLS 1.3 (mqtts://).
	TLSAddr string
	// WSAddr is the address of MQTT over WebSocket (ws://HOST/mqtt).
	WSAddr string
	// WSSAddr is the address of MQTT over secure WebSocket (wss://HOST/mqtt).
	WSSAddr string
	// WSOnBroker also serves MQTT over WebSocket at /mqtt on HTTP.Listen's
	// TCP port while some MQTT listener is on.
	WSOnBroker bool
	// Limits bound clients, sessions and queued messages; each zero field
	// is mqttquic.Limits' default.
	Limits mqttquic.Limits
}

// on reports whether any MQTT listener is configured.
func (m MQTT) on() bool {
	return m.QUICAddr != "" || m.TCPAddr != "" || m.TLSAddr != "" || m.WSAddr != "" || m.WSSAddr != ""
}

// TLS is the server's certificate, and the CA that verifies clients'.
type TLS struct {
	// Certificates are the server's certificates; if empty, CertFile and
	// KeyFile are loaded. One of them is required.
	Certificates []tls.Certificate
	// CertFile and KeyFile are PEM files of the certificate and its key.
	CertFile, KeyFile string
	// ClientCAs verifies client certificates (mTLS; identity = the
	// certificate's CN); nil means ClientCAFile's, or no client
	// certificates requested when that is empty too.
	ClientCAs *x509.CertPool
	// ClientCAFile is a PEM file of CA certificates for ClientCAs.
	ClientCAFile string
}

// Metrics configures the Prometheus endpoint (broker/promexport).
type Metrics struct {
	// Listen is the TCP address of GET /metrics (plain HTTP, no
	// authentication: a non-loopback address is logged as a warning);
	// empty means no endpoint.
	Listen string
	// Trace counts QUIC packets, losses, PTOs and frames of the HTTP/3
	// listener (a little CPU per packet); false keeps only UDP byte and
	// datagram counts.
	Trace bool
}

// Cluster configures the NATS cluster link (broker/cluster.Options, whose
// defaults apply to zero fields). The 32-bit ARM build has no cluster link
// unless built with -tags quiot_cluster: there New refuses URLs.
type Cluster struct {
	// URLs are the NATS servers, comma-separated (nats://h:4222,
	// tls://...); empty means no cluster, and then every other field must
	// be empty too.
	URLs string
	// Name is this broker's name in the cluster; empty means the host name.
	Name string
	// User, Password, Token, NKeySeedFile and CredsFile are the NATS
	// credentials (one kind at most).
	User, Password, Token, NKeySeedFile, CredsFile string
	// CAFile verifies the NATS servers; CertFile and KeyFile are the
	// client certificate for mTLS.
	CAFile, CertFile, KeyFile string
	// Prefix is the first token of the cluster's NATS subjects, stream and
	// bucket; empty means "quiot".
	Prefix string
	// Replicas of the history stream and retained bucket when this broker
	// creates them; zero means 3.
	Replicas int
	// HoldMessages and HoldBytes bound what is held while NATS is
	// unreachable; zero means 10000 and 16 MiB.
	HoldMessages int
	HoldBytes    int64
	// ReceiveBytes bounds the bytes of the messages from the cluster
	// waiting for this broker (local numbering); zero means 64 MiB.
	ReceiveBytes int64
	// AckTimeout, ReconnectWait and MaxReconnectWait: zero means 5 s,
	// 250 ms and 10 s.
	AckTimeout, ReconnectWait, MaxReconnectWait time.Duration
	// LocalNumbering numbers messages per broker instead of cluster-wide.
	LocalNumbering bool
}

// credentials reports whether any field but URLs is set.
func (c Cluster) credentials() bool {
	return c.User != "" || c.Password != "" || c.Token != "" || c.NKeySeedFile != "" || c.CredsFile != "" ||
		c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// FieldError is an error about one field of a Config: an invalid value,
// or (DataDir) a data directory that does not open. Field names it as a
// Go selector from Config (e.g. "Metrics.Listen", "Cluster.URLs").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "node config: " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FieldError) Unwrap() error { return e.Err }

// fieldErr makes a *FieldError.
func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// withDefaults returns a copy of c with the defaults of this package
// applied (those of broker.Options and mqttquic.Options apply there).
func (c Config) withDefaults() Config {
	if c.HTTP.Listen == "" {
		c.HTTP.Listen = ":4433"
	}
	if c.Tuning == nil {
		c.Tuning = quictune.Default()
	}
	if c.Auth == nil {
		c.Auth = auth.LoopbackOnly()
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks what New can check without opening anything; errors are
// *FieldError.
func (c Config) validate() error {
	if len(c.TLS.Certificates) == 0 && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
		return fieldErr("TLS", "no server certificate: set Certificates, or CertFile and KeyFile")
	}
	if _, err := net.ResolveUDPAddr("udp", c.HTTP.Listen); err != nil {
		return fieldErr("HTTP.Listen", "%q: %v", c.HTTP.Listen, err)
	}
	if c.Metrics.Listen != "" {
		if _, err := net.ResolveTCPAddr("tcp", c.Metrics.Listen); err != nil {
			return fieldErr("Metrics.Listen", "%q: %v", c.Metrics.Listen, err)
		}
	}
	if c.Cluster.URLs == "" && c.Cluster.credentials() {
		return fieldErr("Cluster.URLs", "the cluster's credentials and certificates need URLs")
	}
	cl := c.Cluster
	if cl.Replicas < 0 || cl.HoldMessages < 0 || cl.HoldBytes < 0 || cl.ReceiveBytes < 0 || cl.AckTimeout < 0 || cl.ReconnectWait < 0 || cl.MaxReconnectWait < 0 {
		return fieldErr("Cluster", "numbers must not be negative (0 = default)")
	}
	for i, b := range c.Bridges {
		if err := bridge.CheckAuth(b, c.Auth); err != nil {
			return &FieldError{Field: fmt.Sprintf("Bridges[%d]", i), Err: err}
		}
	}
	return nil
}

// loadTLS loads the certificate and the client CA once, for every
// listener.
func (c Config) loadTLS() (TLS, error) {
	t := c.TLS
	if len(t.Certificates) == 0 {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return t, fmt.Errorf("couldn't load server certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	if t.ClientCAs == nil && t.ClientCAFile != "" {
		p, err := certs.LoadPool(t.ClientCAFile)
		if err != nil {
			return t, fmt.Errorf("couldn't load client CA: %w", err)
		}
		t.ClientCAs = p
	}
	return t, nil
}
