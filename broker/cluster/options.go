package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Options configure a Link. Zero values take the defaults documented on
// each field; withDefaults applies them in one place.
type Options struct {
	// URLs are the NATS servers, comma-separated (nats://h:4222,...; tls://
	// for TLS). Required.
	URLs string
	// Name names this broker in the cluster (its NATS connection name and
	// the origin tag of its messages, with a random suffix per run). Default:
	// the host name.
	Name string

	// User and Password authenticate with user/password; Token with a
	// token; NKeySeedFile with an nkey seed file; CredsFile with a NATS
	// .creds file (JWT + nkey). At most one kind. Default: none.
	User, Password, Token, NKeySeedFile, CredsFile string

	// CAFile verifies the NATS servers' certificates (default: the system
	// roots when a tls:// URL or CertFile asks for TLS). CertFile and
	// KeyFile are this broker's client certificate (mTLS). Default: none.
	CAFile, CertFile, KeyFile string

	// Prefix is the first token of every subject, stream and bucket name,
	// so that several fleets can share one NATS account. Default "quiot".
	Prefix string
	// Replicas is the JetStream replication of the history stream and the
	// retained bucket when this broker creates them. Default 3 (R3: a
	// message is acknowledged once two of three NATS nodes hold it); 1 for
	// a single NATS server.
	Replicas int
	// HistoryPerTopic and HistoryBytes bound the history stream (messages
	// per subject, bytes in all) when this broker creates it. Default: the
	// broker's Limits.HistoryPerTopic and Limits.HistoryBytes.
	HistoryPerTopic int
	HistoryBytes    int64

	// HoldMessages and HoldBytes bound the messages held for the cluster
	// while NATS is unreachable (or slower than the publishers). Beyond
	// them the oldest held message is dropped, counted and logged (a gap
	// announced on the cluster when the link is back). Default 10000
	// messages, 16 MiB.
	HoldMessages int
	HoldBytes    int64
	// AckTimeout bounds the wait for JetStream's acknowledgement of one
	// message before it is sent again. Default 5s.
	AckTimeout time.Duration
	// ReconnectWait is the first delay between reconnection attempts; it
	// doubles (with jitter) up to MaxReconnectWait. Defaults 250ms and 10s.
	ReconnectWait, MaxReconnectWait time.Duration
	// ReceiveBuffer is the number of messages from the cluster that may wait
	// for the broker; beyond it NATS drops them as a slow consumer (counted
	// and logged). Default 65536.
	ReceiveBuffer int
	// ReceiveBytes bounds the bytes (subject and payload) of the messages
	// from the cluster that wait for the broker; beyond it they are dropped
	// as a slow consumer too. Default 64 MiB.
	ReceiveBytes int

	// LocalNumbering makes each broker number the messages it delivers
	// itself, in the order they reach it (the broker's own epoch), instead
	// of taking the cluster-wide sequence numbers of the history stream.
	// Default false: cluster-wide numbers, so that a subscriber resumes on
	// any broker after the last message it saw; the broker reads its
	// subscribers' subjects from the stream (the whole stream beyond 256
	// subjects), and while NATS is unreachable the messages a broker
	// accepts wait in the hold until the stream numbers them (local HTTP/3
	// subscribers included; MQTT clients of the same broker get MQTT
	// publishes at once). With LocalNumbering local delivery goes on while
	// NATS is unreachable, but a resume on another broker is announced as a
	// gap and replays that broker's history. A broker with a Store
	// (--data-dir) always numbers its messages itself.
	LocalNumbering bool

	// Logger receives the link's logs. Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultPrefix           = "quiot"
	DefaultReplicas         = 3
	DefaultHoldMessages     = 10000
	DefaultHoldBytes        = 16 << 20
	DefaultAckTimeout       = 5 * time.Second
	DefaultReconnectWait    = 250 * time.Millisecond
	DefaultMaxReconnectWait = 10 * time.Second
	DefaultReceiveBuffer    = 65536
	DefaultReceiveBytes     = 64 << 20
)

// ErrBadOptions wraps every error of Options.validate.
var ErrBadOptions = errors.New("bad cluster options")

// withDefaults returns o with the defaults applied and checks it.
func (o Options) withDefaults() (Options, error) {
	if strings.TrimSpace(o.URLs) == "" {
		return o, fmt.Errorf("%w: no NATS server URL", ErrBadOptions)
	}
	for _, u := range strings.Split(o.URLs, ",") {
		u = strings.TrimSpace(u)
		if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			return o, fmt.Errorf("%w: %q is not a nats:// or tls:// URL", ErrBadOptions, u)
		}
	}
	kinds := 0
	for _, set := range []bool{o.User != "" || o.Password != "", o.Token != "", o.NKeySeedFile != "", o.CredsFile != ""} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return o, fmt.Errorf("%w: give one of user/password, token, nkey or creds", ErrBadOptions)
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return o, fmt.Errorf("%w: a client certificate needs both the certificate and the key file", ErrBadOptions)
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
		if o.Name == "" {
			o.Name = "quiot"
		}
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, ".*> \t\r\n") {
		return o, fmt.Errorf("%w: prefix %q must be one NATS token", ErrBadOptions, o.Prefix)
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		return o, fmt.Errorf("%w: replicas %d (want 1 to 5)", ErrBadOptions, o.Replicas)
	}
	if o.HistoryPerTopic < 0 || o.HistoryBytes < 0 || o.HoldMessages < 0 || o.HoldBytes < 0 || o.ReceiveBuffer < 0 || o.ReceiveBytes < 0 {
		return o, fmt.Errorf("%w: negative limit", ErrBadOptions)
	}
	if o.HoldMessages == 0 {
		o.HoldMessages = DefaultHoldMessages
	}
	if o.HoldBytes == 0 {
		o.HoldBytes = DefaultHoldBytes
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = DefaultReconnectWait
	}
	if o.MaxReconnectWait <= 0 {
		o.MaxReconnectWait = DefaultMaxReconnectWait
	}
	o.MaxReconnectWait = max(o.MaxReconnectWait, o.ReconnectWait)
	if o.ReceiveBuffer == 0 {
		o.ReceiveBuffer = DefaultReceiveBuffer
	}
	if o.ReceiveBytes == 0 {
		o.ReceiveBytes = DefaultReceiveBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
