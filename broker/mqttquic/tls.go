package mqttquic

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// MQTT over TLS (mqtts://, port 8883 by convention): mochi's TCP listener
// with a TLS 1.3-only configuration, the same certificate and client CAs as
// MQTT over QUIC. A verified client certificate's CN is the identity, as on
// QUIC (authenticate reads it from the *tls.Conn).

// serverTLS returns the TLS configuration of the MQTT over TLS listener:
// Options.TLS cloned, the profile's server settings, TLS 1.3 only, client
// certificates verified when given, no ALPN (MQTT clients rarely send one,
// and a server that names protocols refuses a client that offers others).
func (s *Server) serverTLS() *tls.Config {
	tc := s.opts.TLS.Clone()
	s.opts.Tuning.ApplyServerTLS(tc)
	tc.MinVersion = tls.VersionTLS13
	tc.NextProtos = nil
	if s.opts.ClientCAs != nil {
		tc.ClientCAs = s.opts.ClientCAs
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc
}

// startTLS adds the MQTT over TLS listener when Options.TLSAddr is set.
func (s *Server) startTLS() error {
	if s.opts.TLSAddr == "" {
		return nil
	}
	s.tlsl = listeners.NewTCP(listeners.Config{ID: "mqtt-tls", Address: s.opts.TLSAddr, TLSConfig: s.serverTLS()})
	if err := s.mq.AddListener(sessionEnds{s.tlsl, s.compat}); err != nil {
		return fmt.Errorf("mqtt server: tls listener: %w", err)
	}
	return nil
}

// TLSAddr returns the bound address of the MQTT over TLS listener, or "".
func (s *Server) TLSAddr() string {
	if s.tlsl == nil {
		return ""
	}
	return s.tlsl.Address()
}

// warnPlainTCP warns when plain MQTT/TCP listens beyond loopback: passwords
// and tokens in CONNECT, and every message, cross the network in clear.
func (s *Server) warnPlainTCP() {
	if s.tcp == nil || IsLoopbackAddr(s.tcp.Address()) {
		return
	}
	s.opts.Logger.Warn("plain MQTT over TCP listens on a non-loopback address: passwords and messages cross the network in clear; use MQTT over TLS (--mqtt-tls :8883) or QUIC, or listen on 127.0.0.1", "address", s.tcp.Address())
}

// IsLoopbackAddr reports whether a listen address ("host:port") reaches
// only this host: a loopback IP or "localhost". An empty host (all
// interfaces) and names other than localhost are not loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
