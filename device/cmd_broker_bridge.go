package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/config"
)

// The bridges of `quiot broker`: the [[bridge]] tables of its
// configuration file (docs/bridge.md). A table with an error stops the
// broker before it starts, naming the bridge and the key. SIGHUP reads the
// tables again (bridge.Manager.Reload: unchanged bridges keep running);
// the ACL's reload (cmd_broker_auth.go) gets the same signal.

type bridgeState struct {
	path string // the configuration file ("" none)
	cfgs []bridge.Config

	mu  sync.Mutex // mgr is read by metrics scrapes
	mgr *bridge.Manager
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
	s.cfgs, s.path = nil, ""
	s.mu.Lock()
	s.mgr = nil
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
	s.cfgs, s.path = cfgs, path
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
	if s.path != "" {
		metricsCollectors = append(metricsCollectors, bridge.Collector(func() []*bridge.Bridge {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.mgr == nil {
				return nil
			}
			return s.mgr.Bridges()
		}))
	}
	return nil
}

// start runs the bridges (each connects in the background) and reloads
// them on SIGHUP.
func (s *bridgeState) start(ctx context.Context, b *broker.Broker, opts *broker.Options, log *slog.Logger, stdout io.Writer) (func(context.Context) error, error) {
	if s.path == "" {
		return nil, nil
	}
	mgr := bridge.NewManager(b, log)
	if err := mgr.Reload(ctx, s.cfgs); err != nil {
		_ = mgr.Close(context.Background())
		return nil, err
	}
	s.mu.Lock()
	s.mgr = mgr
	s.mu.Unlock()
	for _, c := range s.cfgs {
		fmt.Fprintf(stdout, "bridge %s: %s (out %v, in %v)\n", c.Name, c.URL, c.Out, c.In)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-hup:
				s.reload(ctx, mgr, opts, log)
			case <-done:
				return
			}
		}
	}()
	return func(ctx context.Context) error {
		signal.Stop(hup)
		close(done)
		<-stopped
		return mgr.Close(ctx)
	}, nil
}

// reload applies the file's [[bridge]] tables as they are now; a file
// with an error changes nothing.
func (s *bridgeState) reload(ctx context.Context, mgr *bridge.Manager, opts *broker.Options, log *slog.Logger) {
	cfgs, err := bridge.LoadFile(s.path)
	for _, c := range cfgs {
		if err == nil {
			err = bridge.CheckAuth(c, opts.Auth)
		}
	}
	if err != nil {
		log.Error("SIGHUP: bridge tables not reloaded: the running bridges stay", "config", s.path, "err", err)
		return
	}
	if err := mgr.Reload(ctx, cfgs); err != nil {
		log.Error("SIGHUP: bridges reloaded with errors", "err", err)
		return
	}
	log.Info("SIGHUP: bridges reloaded", "config", s.path, "bridges", len(cfgs))
}
