// Command benchbroker runs quiot's broker with only its MQTT/TCP listener
// (bridged to the HTTP/3 hub, as `quiot broker --mqtt-tcp` runs it) so a
// benchmark can measure it as a separate process, side by side with
// mosquitto. It prints "ready HOST:PORT" and runs until stdin closes.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/certs"
)

func main() {
	addr := flag.String("tcp", "127.0.0.1:0", "MQTT/TCP address")
	standalone := flag.Bool("standalone", os.Getenv("BENCHBROKER_STANDALONE") != "", "mochi without the HTTP/3 broker and bridge (to measure the bridge's cost)")
	prof := flag.String("cpuprofile", os.Getenv("BENCHBROKER_CPUPROFILE"), "write a CPU profile to this file")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if err := run(*addr, *standalone); err != nil {
		fmt.Fprintln(os.Stderr, "benchbroker:", err)
		os.Exit(1) //nolint:gocritic // the profile is not needed on failure
	}
}

func run(addr string, standalone bool) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := certs.SelfSigned(nil, nil)
	if err != nil {
		return err
	}
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", DisableTCP: true, Certificates: []tls.Certificate{c.TLS}, Logger: log})
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	defer b.Close()
	o := mqttquic.Options{QUICAddr: "off", TCPAddr: addr, Broker: b, Logger: log}
	if standalone {
		o.Broker = nil
	}
	s, err := mqttquic.New(o)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf("ready %s\n", s.TCPAddr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
