package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/node"
)

// MQTT over QUIC, TCP, TLS and WebSocket listeners of `quiot broker`, joined to the
// HTTP/3 broker's topic space, identities and ACL (broker/node).

type mqttFlags struct {
	quicAddr string
	tcpAddr  string
	tlsAddr  string
	wsAddr   string
	wssAddr  string
	wsListen bool
	limits   mqttquic.Limits
}

func (f *mqttFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.quicAddr, "mqtt-quic", ":14567", `UDP address of MQTT over QUIC (ALPN "mqtt", EMQX/NanoMQ compatible); empty = off`)
	fs.StringVar(&f.tcpAddr, "mqtt-tcp", "", "TCP address of plain MQTT (e.g. :1883; passwords travel in clear: prefer --mqtt-tls); empty = off")
	fs.StringVar(&f.tlsAddr, "mqtt-tls", "", "TCP address of MQTT over TLS 1.3, mqtts:// (e.g. :8883); empty = off")
	fs.StringVar(&f.wsAddr, "mqtt-ws", "", "TCP address of MQTT over WebSocket, ws://HOST/mqtt (e.g. 127.0.0.1:8080; passwords travel in clear: prefer --mqtt-wss); empty = off")
	fs.BoolVar(&f.wsListen, "mqtt-ws-on-listen", true, "also serve MQTT over WebSocket at wss://HOST:PORT/mqtt on the --listen port (TCP, HTTP/1.1 upgrade; pages of the broker's own origin and of --cors-origins) while MQTT is on")
	fs.StringVar(&f.wssAddr, "mqtt-wss", "", "TCP address of MQTT over secure WebSocket (TLS 1.3), wss://HOST/mqtt (e.g. :8884); web pages need --cors-origins; empty = off")
	// Limits (mqttquic.Limits); 0 keeps the default named.
	l := &f.limits
	fs.IntVar(&l.MaxClients, "mqtt-max-clients", 0, "connected MQTT clients at most (0 = 1024)")
	fs.IntVar(&l.MaxSessions, "mqtt-max-sessions", 0, "MQTT sessions, connected and offline, at most (0 = 2048)")
	fs.IntVar(&l.MaxSessionsPerIdentity, "mqtt-max-sessions-per-identity", 0, "MQTT sessions of one identity, anonymous clients per source address, at most (0 = 256)")
	fs.DurationVar(&l.AnonymousSessionExpiry, "mqtt-anonymous-session-expiry", 0, "how long an anonymous client's offline session is kept (0 = 5m)")
	fs.IntVar(&l.MaxQueuedMessages, "mqtt-max-queued-messages", 0, "QoS 1/2 messages one MQTT session holds at most (0 = 1024)")
	fs.Int64Var(&l.MaxQueuedBytes, "mqtt-max-queued-bytes", 0, "bytes of messages one MQTT session holds at most, and apart from them of QoS 0 messages waiting to be written to one client (0 = 4MiB)")
	fs.Int64Var(&l.MaxQueuedBytesTotal, "mqtt-max-queued-bytes-total", 0, "bytes of messages all MQTT sessions hold at most, and apart from them of QoS 0 messages waiting to be written to clients (0 = 64MiB)")
	fs.DurationVar(&l.ConnectTimeout, "mqtt-connect-timeout", 0, "close an MQTT connection that sends no CONNECT within this time, TLS handshake included (0 = 10s)")
	fs.IntVar(&l.MaxPreConnectPerAddr, "mqtt-max-preconnect-per-addr", 0, "MQTT connections of one source address without CONNECT yet at most (0 = 64)")
}

// config maps the flags to the node's MQTT listeners (an empty address is
// a listener that is off, as for the flags).
func (f *mqttFlags) config() node.MQTT {
	return node.MQTT{QUICAddr: f.quicAddr, TCPAddr: f.tcpAddr, TLSAddr: f.tlsAddr, WSAddr: f.wsAddr, WSSAddr: f.wssAddr,
		WSOnBroker: f.wsListen, Limits: f.limits}
}

// printAddrs prints the MQTT listeners' addresses.
func (f *mqttFlags) printAddrs(stdout io.Writer, a node.Addrs) {
	if f.quicAddr == "" && f.tcpAddr == "" && f.tlsAddr == "" && f.wsAddr == "" && f.wssAddr == "" {
		return
	}
	if a.MQTTQUIC != nil {
		fmt.Fprintf(stdout, "mqtt listening: mqtt-quic://%s (MQTT over QUIC, UDP)\n", a.MQTTQUIC)
	}
	if a.MQTTTCP != "" {
		fmt.Fprintf(stdout, "mqtt listening: mqtt://%s (MQTT over TCP)\n", a.MQTTTCP)
	}
	if a.MQTTTLS != "" {
		fmt.Fprintf(stdout, "mqtt listening: mqtts://%s (MQTT over TLS)\n", a.MQTTTLS)
	}
	if a.MQTTWS != "" {
		fmt.Fprintf(stdout, "mqtt listening: ws://%s%s (MQTT over WebSocket)\n", a.MQTTWS, mqttquic.WSPath)
	}
	if a.MQTTWSS != "" {
		fmt.Fprintf(stdout, "mqtt listening: wss://%s%s (MQTT over secure WebSocket)\n", a.MQTTWSS, mqttquic.WSPath)
	}
	if f.wsListen && a.HTTPTCP != nil {
		fmt.Fprintf(stdout, "mqtt listening: wss://%s%s (MQTT over secure WebSocket on the broker's port)\n", a.HTTPTCP, broker.MQTTWebSocketPath)
	}
}
