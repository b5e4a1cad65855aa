package mqttquic

import (
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// Limits bound what MQTT clients can make the broker hold, in total and
// per identity (the authenticated user, certificate CN, or anonymous: all
// anonymous clients share one identity). A client that would exceed a
// limit is refused with a reason code (MQTT 5 CONNACK 0x97 Quota exceeded;
// MQTT 3.1.1 return code 3 Server unavailable) or, for messages, the
// message is not queued for it and the drop is counted (Server.Security).
//
// The per-identity and per-session limits apply when the server is joined
// to a broker (Options.Broker); a standalone server applies MaxClients,
// MaxQueuedMessages and MaxReceiveInflight.
type Limits struct {
	// MaxClients caps the connected MQTT clients (QUIC and TCP together);
	// zero means 1024.
	MaxClients int
	// MaxSessions caps the sessions the broker holds, connected and
	// offline together; zero means 2048.
	MaxSessions int
	// MaxSessionsPerIdentity caps the sessions (connected and offline) of
	// one identity, anonymous clients counted per source address; a client
	// taking over its own session does not count twice. Zero means 256.
	MaxSessionsPerIdentity int
	// AnonymousSessionExpiry caps how long the offline session of an
	// anonymous client is kept (authenticated clients are capped by
	// Options.MaxSessionExpiry); zero means 5 minutes.
	AnonymousSessionExpiry time.Duration
	// MaxQueuedMessages caps the QoS 1 and 2 messages a session holds
	// (sent and not yet acknowledged, or waiting for an offline client);
	// zero means 1024 (mochi's default is 8192).
	MaxQueuedMessages int
	// MaxQueuedBytes caps the bytes (topic and payload) of the messages a
	// session holds; once reached, further messages are not queued for it
	// until some are acknowledged or the session ends. It bounds too,
	// counted apart, the QoS 0 messages waiting to be written to one
	// client (MaxQueuedBytesTotal all clients'). Zero means 4 MiB.
	MaxQueuedBytes int64
	// MaxQueuedBytesTotal caps the bytes of the messages all sessions hold
	// together; zero means 64 MiB.
	MaxQueuedBytesTotal int64
	// MaxReceiveInflight caps the QoS 1 and 2 publishes a client may have
	// unacknowledged towards the broker (MQTT 5 Receive Maximum); zero
	// means 1024.
	MaxReceiveInflight int
	// BridgeQueueBytes caps the bytes of HTTP/3 messages waiting to be
	// injected into MQTT (beyond it they are dropped and counted); zero
	// means 16 MiB.
	BridgeQueueBytes int64
	// BridgeQueueMessages caps the number of those messages; zero means
	// 65536.
	BridgeQueueMessages int
	// ConnectTimeout bounds the time from a connection's start (TLS
	// handshake included) to its CONNECT packet; a connection that sends
	// none in time is closed. Zero means 10 s.
	ConnectTimeout time.Duration
	// MaxPreConnectPerAddr caps the connections of one source address
	// that have not sent CONNECT yet; more are closed at once. Zero
	// means 64.
	MaxPreConnectPerAddr int
	// QUICRetryAbove is the number of MQTT-over-QUIC handshakes in
	// progress from addresses not yet validated from which a new
	// connection attempt must first prove its source address (a QUIC
	// Retry, one more round trip), before it counts against
	// MaxPreConnectPerAddr (which a 0-RTT connection reaches before its
	// handshake completes): spoofed attempts then hold at most that many
	// at a time. Zero means 64; a negative value asks every new
	// connection for a Retry (the HTTP/3 side's broker.Limits.QUICRetryAbove,
	// docs/security.md).
	QUICRetryAbove int
}

func (l *Limits) ensureDefaults() {
	if l.MaxClients == 0 {
		l.MaxClients = 1024
	}
	if l.MaxSessions == 0 {
		l.MaxSessions = 2048
	}
	if l.MaxSessionsPerIdentity == 0 {
		l.MaxSessionsPerIdentity = 256
	}
	if l.AnonymousSessionExpiry == 0 {
		l.AnonymousSessionExpiry = 5 * time.Minute
	}
	if l.MaxQueuedMessages == 0 {
		l.MaxQueuedMessages = 1024
	}
	if l.MaxQueuedBytes == 0 {
		l.MaxQueuedBytes = 4 << 20
	}
	if l.MaxQueuedBytesTotal == 0 {
		l.MaxQueuedBytesTotal = 64 << 20
	}
	if l.MaxReceiveInflight == 0 {
		l.MaxReceiveInflight = 1024
	}
	if l.BridgeQueueBytes == 0 {
		l.BridgeQueueBytes = 16 << 20
	}
	if l.BridgeQueueMessages == 0 {
		l.BridgeQueueMessages = 1 << 16
	}
	if l.ConnectTimeout == 0 {
		l.ConnectTimeout = 10 * time.Second
	}
	if l.MaxPreConnectPerAddr == 0 {
		l.MaxPreConnectPerAddr = 64
	}
}

// apply sets mochi's capabilities from the limits. With a broker the auth
// hook enforces MaxClients itself (with a counter and Quota exceeded), so
// mochi's own check stays off there.
func (l *Limits) apply(caps *mqtt.Capabilities, standalone bool) {
	if standalone {
		caps.MaximumClients = int64(l.MaxClients)
	}
	caps.MaximumInflight = uint16(min(l.MaxQueuedMessages, 65535))
	caps.ReceiveMaximum = uint16(min(l.MaxReceiveInflight, 65535))
	// QoS 0 deliveries waiting to be written to a client that does not
	// read are held to the same bytes as a session's QoS 1 queue, counted
	// apart from it (mochi bounded them in packets only: 256 copies of
	// the largest packet per client).
	caps.MaximumClientWritesPendingBytes = l.MaxQueuedBytes
	caps.MaximumWritesPendingBytes = l.MaxQueuedBytesTotal
}
