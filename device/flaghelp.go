package main

import "github.com/quiot/quiot/internal/cli"

// flagLayouts lay out the -h text of the commands with many flags: group
// headings in order, then examples (see internal/cli.Help). A flag missing
// from its command's groups is listed under "Other flags";
// TestFlagLayoutsNameRealFlags keeps the names current.
var flagLayouts = map[string]cli.Help{
	"broker": {
		Groups: []cli.Group{
			{Title: "Listeners", Flags: []string{"listen", "mqtt-quic", "mqtt-tls", "mqtt-tcp", "mqtt-wss", "mqtt-ws", "mqtt-ws-on-listen", "dashboard", "cors-origins"}},
			{Title: "Security and authentication", Flags: []string{"dev", "dev-cert-out", "cert", "key", "client-ca", "auth", "allow-anonymous", "session-ttl",
				"auth-fail-limit", "auth-fail-window", "auth-fail-backoff", "auth-fail-addrs"}},
			{Title: "Limits", Flags: []string{"max-payload", "max-topic-bytes", "max-topic-levels", "max-conns", "max-conns-per-addr", "quic-retry-above", "max-conns-per-identity",
				"max-subscriptions", "max-subscriptions-per-identity", "max-subscriptions-total", "max-streams",
				"max-header-bytes", "idle-timeout", "queue", "queue-bytes", "queue-bytes-total", "queue-policy"}},
			{Title: "MQTT sessions", Flags: []string{"mqtt-max-clients", "mqtt-max-sessions", "mqtt-max-sessions-per-identity",
				"mqtt-anonymous-session-expiry", "mqtt-max-queued-messages", "mqtt-max-queued-bytes", "mqtt-max-queued-bytes-total",
				"mqtt-connect-timeout", "mqtt-max-preconnect-per-addr"}},
			{Title: "Storage and history", Flags: []string{"data-dir", "history", "history-bytes", "retained-bytes"}},
			{Title: "Cluster (docs/cluster.md)", Flags: []string{"cluster", "cluster-name", "cluster-prefix", "cluster-replicas",
				"cluster-local-numbering", "cluster-user", "cluster-password", "cluster-token", "cluster-creds", "cluster-nkey",
				"cluster-ca", "cluster-cert", "cluster-key", "cluster-hold-messages", "cluster-hold-bytes",
				"cluster-receive-bytes", "cluster-ack-timeout", "cluster-reconnect-wait", "cluster-max-reconnect-wait"}},
			{Title: "Metrics and logging", Flags: []string{"metrics-listen", "metrics-trace", "log-level"}},
			{Title: "Tuning", Flags: []string{"tuning", "stream-inflight", "gc-percent", "memory-limit", "procs", "shutdown-grace"}},
			{Title: "Configuration", Flags: []string{"config", "check-config"}},
		},
		Examples: []cli.Example{
			{Comment: "development: a throwaway certificate, open to all; HTTP/3 :4433, MQTT over QUIC :14567",
				Command: "quiot broker --dev"},
			{Comment: "production: certificates, an ACL (quiot token/passwd add users), state on disk",
				Command: "quiot broker --cert /etc/quiot/broker.pem --key /etc/quiot/broker-key.pem --auth /etc/quiot/acl.toml --data-dir /var/lib/quiot"},
			{Comment: "MQTT over TLS (mqtts://) on :8883, plain MQTT (mqtt://) on loopback only",
				Command: "quiot broker --dev --mqtt-tls :8883 --mqtt-tcp 127.0.0.1:1883"},
			{Comment: "MQTT over secure WebSocket (wss://HOST:8884/mqtt) for browser apps (MQTT.js) served from https://app.example",
				Command: "quiot broker --dev --mqtt-wss :8884 --cors-origins https://app.example"},
			{Comment: "check the configuration file and the flags, then exit",
				Command: "quiot broker --check-config"},
		},
	},
	"pub": {
		Groups: append(clientGroups(),
			cli.Group{Title: "Messages", Flags: []string{"topic", "payload", "payload-size", "stdin", "sensor", "qos", "retain",
				"mode", "count", "rate", "inflight", "connect-timeout", "quiet"}},
			cli.Group{Title: "Spool (messages kept on disk until delivered)", Flags: []string{"spool", "spool-fsync", "spool-max-age", "spool-max-bytes"}},
			cli.Group{Title: "Logging, metrics and configuration", Flags: []string{"log-level", "metrics-out", "config"}},
		),
		Examples: []cli.Example{
			{Comment: "one message over HTTP/3 to a --dev broker", Command: "quiot pub --broker https://localhost:4433 --insecure --topic sensors/t1 --payload 21.5"},
			{Comment: "QoS 1 over MQTT over TLS with a user name and password", Command: "quiot pub --broker mqtts://broker.example:8883 --ca ca.pem --username dev1 --token SECRET --topic sensors/t1 --qos 1 --payload 21.5"},
		},
	},
	"sub": {
		Groups: append(clientGroups(),
			cli.Group{Title: "Subscription", Flags: []string{"topic", "since", "dedup", "count", "gpio-out"}},
			cli.Group{Title: "Output", Flags: []string{"format", "v", "separator", "N", "quiet"}},
			cli.Group{Title: "Logging, metrics and configuration", Flags: []string{"log-level", "metrics-out", "config"}},
		),
		Examples: []cli.Example{
			{Comment: "everything under sensors/ from a --dev broker over HTTP/3", Command: "quiot sub --broker https://localhost:4433 --insecure --topic 'sensors/#'"},
			{Comment: "the same over MQTT over QUIC", Command: "quiot sub --broker mqtt-quic://localhost:14567 --insecure --topic 'sensors/#'"},
		},
	},
}

// clientGroups are the connection groups pub and sub share.
func clientGroups() []cli.Group {
	return []cli.Group{
		{Title: "Connection", Flags: []string{"broker", "tuning", "reconnect", "max-backoff", "session-file"}},
		{Title: "Security and authentication", Flags: []string{"insecure", "ca", "pin", "cert", "key", "token", "username", "auth-every-request"}},
	}
}

// sizeFlags are the byte-size flags of each command: they accept 1k,
// 256KiB, 16MiB or plain bytes (internal/cli.SizeFlags), also in the
// configuration file.
var sizeFlags = map[string][]string{
	"broker": {"max-payload", "history-bytes", "retained-bytes", "max-header-bytes", "cluster-hold-bytes", "cluster-receive-bytes",
		"mqtt-max-queued-bytes", "mqtt-max-queued-bytes-total", "queue-bytes", "queue-bytes-total"},
	"pub":             {"payload-size", "spool-max-bytes"},
	"bench-reconnect": {"payload"},
}
