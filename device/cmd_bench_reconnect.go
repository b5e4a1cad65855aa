//go:build !arm && !nobench

// `quiot bench-reconnect` is left out of the 32-bit ARM (Pi) build and of
// -tags nobench with the rest of device/bench (pibuild.go).

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quiot/quiot/device/bench"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/version"
)

func init() {
	register(command{
		name:    "bench-reconnect",
		summary: "the reconnect workload (connect, publish one message, close, sleep): HTTP/3 with and without 0-RTT vs MQTT over QUIC",
		run:     runBenchReconnect,
	})
}

func runBenchReconnect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench-reconnect", stderr)
	profile := fs.String("profile", "nbiot", "link profile")
	tuning := fs.String("tuning", "lean", "base QUIC profile (default, lean or a TOML file); 0-RTT is set per variant")
	wakeups := fs.Int("wakeups", 6, "wake-ups per run (the first is cold)")
	repeat := fs.Int("repeat", 3, "runs per variant")
	payload := fs.Int("payload", 256, "payload bytes")
	sleep := fs.Duration("sleep", time.Second, "pause between wake-ups")
	out := fs.String("out", "", "directory for reconnect.md and reconnect.json (empty = print only)")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if *wakeups < 2 || *repeat < 1 || *payload < 1 {
		return fmt.Errorf("%w: want --wakeups >= 2, --repeat >= 1 and --payload >= 1", errUsage)
	}
	base, err := quictune.Load(*tuning)
	if err != nil {
		return fmt.Errorf("%w: --tuning: %v", errUsage, err)
	}
	link, err := bench.NewImpairLink()
	if err != nil {
		return err
	}
	if _, ok := link.Info(*profile); !ok {
		return fmt.Errorf("%w: unknown link profile %q (want one of %s)", errUsage, *profile, strings.Join(link.Names(), ", "))
	}
	st, err := bench.RunReconnectStudy(ctx, link, *profile, base, bench.DefaultReconnectVariants(), *wakeups, *repeat, *payload, *sleep, log)
	if err != nil {
		return err
	}
	st.Host, st.Version = bench.HostInfo(), version.String()
	if err := st.WriteMarkdown(stdout); err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("couldn't create %s: %w", *out, err)
	}
	f, err := os.Create(filepath.Join(*out, "reconnect.md"))
	if err != nil {
		return fmt.Errorf("couldn't write the report: %w", err)
	}
	if err := st.WriteMarkdown(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("couldn't write the report: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "reconnect.json"), append(b, '\n'), 0o644)
}
