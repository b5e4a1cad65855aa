package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/certs"
)

// MQTT over QUIC and MQTT/TCP listeners of `quiot broker`, joined to the
// HTTP/3 broker's topic space, identities and ACL.

type mqttFlags struct {
	quicAddr string
	tcpAddr  string
	tlsAddr  string
}

func init() {
	var f mqttFlags
	registerBrokerExtension(brokerExtension{
		name: "mqtt",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&f.quicAddr, "mqtt-quic", ":14567", `UDP address of MQTT over QUIC (ALPN "mqtt", EMQX/NanoMQ compatible); empty disables`)
			fs.StringVar(&f.tcpAddr, "mqtt-tcp", "", "TCP address of plain MQTT (e.g. :1883; passwords travel in clear: prefer --mqtt-tls); empty disables")
			fs.StringVar(&f.tlsAddr, "mqtt-tls", "", "TCP address of MQTT over TLS 1.3, mqtts:// (e.g. :8883); empty disables")
		},
		start: f.start,
	})
}

func (f *mqttFlags) start(_ context.Context, b *broker.Broker, opts *broker.Options, log *slog.Logger, stdout io.Writer) (func(context.Context) error, error) {
	if f.quicAddr == "" && f.tcpAddr == "" && f.tlsAddr == "" {
		return nil, nil
	}
	o := mqttquic.Options{QUICAddr: f.quicAddr, TCPAddr: f.tcpAddr, TLSAddr: f.tlsAddr, Broker: b, Profile: opts.Tuning, Logger: log}
	o.DataDir = brokerDataDir // cmd_broker_data.go
	if o.QUICAddr == "" {
		o.QUICAddr = "off"
	}
	if f.quicAddr != "" || f.tlsAddr != "" {
		tc := &tls.Config{Certificates: opts.Certificates}
		if len(tc.Certificates) == 0 {
			c, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("couldn't load server certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{c}
		}
		o.TLS = tc
		o.ClientCAs = opts.ClientCAs
		if o.ClientCAs == nil && opts.ClientCAFile != "" {
			p, err := certs.LoadPool(opts.ClientCAFile)
			if err != nil {
				return nil, fmt.Errorf("couldn't load client CA: %w", err)
			}
			o.ClientCAs = p
		}
	}
	s, err := mqttquic.New(o)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	if a := s.QUICAddr(); a != nil {
		fmt.Fprintf(stdout, "mqtt listening: mqtt-quic://%s (MQTT over QUIC, UDP)\n", a)
	}
	if a := s.TCPAddr(); a != "" {
		fmt.Fprintf(stdout, "mqtt listening: mqtt://%s (MQTT over TCP)\n", a)
	}
	if a := s.TLSAddr(); a != "" {
		fmt.Fprintf(stdout, "mqtt listening: mqtts://%s (MQTT over TLS)\n", a)
	}
	return func(context.Context) error { return s.Close() }, nil
}
