// Command benchbroker runs quiot's broker with only its MQTT/TCP listener
// (bridged to the HTTP/3 hub, as `quiot broker --mqtt-tcp` runs it) so a
// benchmark can measure it as a separate process, side by side with
// mosquitto. Its garbage collector is set as `quiot broker` sets it
// (internal/gctune defaults unless flags or GOGC/GOMEMLIMIT say otherwise).
// It prints "ready HOST:PORT" and runs until stdin closes.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/gctune"
)

func main() {
	addr := flag.String("tcp", "127.0.0.1:0", "MQTT/TCP address")
	standalone := flag.Bool("standalone", os.Getenv("BENCHBROKER_STANDALONE") != "", "mochi without the HTTP/3 broker and bridge (to measure the bridge's cost)")
	prof := flag.String("cpuprofile", os.Getenv("BENCHBROKER_CPUPROFILE"), "write a CPU profile to this file")
	memprof := flag.String("memprofile", os.Getenv("BENCHBROKER_MEMPROFILE"), "write a heap profile and GC statistics (FILE.txt) to this file at exit")
	wbuf := flag.Int("write-buffer", 0, "mqttquic.Options.WriteBufferSize (0 = default)")
	gcPercent := flag.Int("gc-percent", 0, "GC percent as `quiot broker --gc-percent` (0 = its default; GOGC wins then)")
	memLimit := flag.String("memory-limit", "auto", "memory limit as `quiot broker --memory-limit`")
	flag.Parse()
	lim, err := gctune.ParseSize(*memLimit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchbroker:", err)
		os.Exit(2)
	}
	gctune.Apply(gctune.Options{Percent: *gcPercent, MemoryLimit: lim})
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if *memprof != "" {
		defer writeMemProfile(*memprof)
	}
	if err := run(*addr, *standalone, *wbuf); err != nil {
		fmt.Fprintln(os.Stderr, "benchbroker:", err)
		os.Exit(1) //nolint:gocritic // the profile is not needed on failure
	}
}

func run(addr string, standalone bool, wbuf int) error {
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
	o := mqttquic.Options{QUICAddr: "off", TCPAddr: addr, Broker: b, Logger: log, WriteBufferSize: wbuf}
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

func writeMemProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("allocs").WriteTo(f, 0)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = os.WriteFile(path+".txt", []byte(fmt.Sprintf("NumGC %d\nHeapInuse %d\nHeapAlloc %d\nHeapSys %d\nStackInuse %d\nSys %d\nTotalAlloc %d\nMallocs %d\nGCCPUFraction %.4f\nPauseTotalNs %d\n",
		ms.NumGC, ms.HeapInuse, ms.HeapAlloc, ms.HeapSys, ms.StackInuse, ms.Sys, ms.TotalAlloc, ms.Mallocs, ms.GCCPUFraction, ms.PauseTotalNs)), 0o644)
}
