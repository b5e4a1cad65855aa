package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/config"
)

// The bridges of `quiot broker`: the [[bridge]] tables of its
// configuration file (docs/bridge.md). A table with an error stops the
// broker before it starts, naming the bridge and the key.

type bridgeState struct {
	cfgs []bridge.Config

	mu      sync.Mutex // running is read by metrics scrapes
	running []*bridge.Bridge
}

func init() {
	var s bridgeState
	registerBrokerExtension(brokerExtension{
		name:      "bridge",
		parsed:    s.parsed,
		configure: s.configure,
		start:     s.start,
	})
}

// parsed reads the [[bridge]] tables of the file --config names (a missing
// file at the default path means no bridges, as for the [broker] table).
func (s *bridgeState) parsed(fs *flag.FlagSet) error {
	s.cfgs = nil
	s.mu.Lock()
	s.running = nil
	s.mu.Unlock()
	f := fs.Lookup(config.FlagName)
	if f == nil || f.Value.String() == "" {
		return nil
	}
	path := f.Value.String()
	explicit := false
	fs.Visit(func(v *flag.Flag) { explicit = explicit || v.Name == config.FlagName })
	if _, err := os.Stat(path); !explicit && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	cfgs, err := bridge.LoadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	s.cfgs = cfgs
	return nil
}

// configure checks the bridges against the broker's ACL mode and adds
// their metrics (quiot_bridge_*) to --metrics-listen.
func (s *bridgeState) configure(opts *broker.Options, _ io.Writer) error {
	for _, c := range s.cfgs {
		if err := bridge.CheckAuth(c, opts.Auth); err != nil {
			return err
		}
	}
	if len(s.cfgs) > 0 {
		metricsCollectors = append(metricsCollectors, bridge.Collector(func() []*bridge.Bridge {
			s.mu.Lock()
			defer s.mu.Unlock()
			return slices.Clone(s.running)
		}))
	}
	return nil
}

// start runs the bridges; each connects in the background.
func (s *bridgeState) start(_ context.Context, b *broker.Broker, _ *broker.Options, log *slog.Logger, stdout io.Writer) (func(context.Context) error, error) {
	if len(s.cfgs) == 0 {
		return nil, nil
	}
	stop := func(ctx context.Context) error {
		s.mu.Lock()
		running := s.running
		s.running = nil
		s.mu.Unlock()
		for _, br := range running {
			_ = br.Close(ctx)
		}
		return nil
	}
	for _, c := range s.cfgs {
		br, err := bridge.New(b, c, log)
		if err == nil {
			if err = br.Start(); err != nil {
				_ = br.Close(context.Background()) // releases its store
			}
		}
		if err != nil {
			_ = stop(context.Background())
			return nil, err
		}
		s.mu.Lock()
		s.running = append(s.running, br)
		s.mu.Unlock()
		fmt.Fprintf(stdout, "bridge %s: %s (out %v, in %v)\n", c.Name, c.URL, c.Out, c.In)
	}
	return stop, nil
}
