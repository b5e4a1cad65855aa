package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/store"
)

// `quiot broker --data-dir DIR`: retained messages, resume history, the
// epoch and sequence counter (DIR/broker.db) and persistent MQTT sessions
// (DIR/mqtt-sessions.db) survive restarts. Off by default (also with
// --dev, whose defaults an explicit --data-dir overrides); the packaged
// configuration sets /var/lib/quiot.
//
// This file sorts before cmd_broker_service.go, so --check-config checks
// the data directory too.

type dataFlags struct {
	dir         string
	checkConfig bool
}

// brokerDataDir is the data directory in effect ("" = memory only), for
// the MQTT sessions (cmd_broker_mqtt.go).
var brokerDataDir string

func init() {
	var f dataFlags
	registerBrokerExtension(brokerExtension{
		name: "data-dir",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&f.dir, "data-dir", "", "directory where retained messages, resume history, the epoch and persistent MQTT sessions survive restarts (created 0700); empty = memory only")
		},
		parsed: func(fs *flag.FlagSet) error {
			if c := fs.Lookup("check-config"); c != nil {
				f.checkConfig = c.Value.String() == "true"
			}
			return nil
		},
		configure: f.configure,
	})
}

// configure opens the store on the data directory (with --check-config it
// only checks that the directory holds a readable quiot state).
func (f *dataFlags) configure(opts *broker.Options, _ io.Writer) error {
	brokerDataDir = ""
	if f.dir == "" {
		return nil
	}
	st, err := store.Open(store.Options{Dir: f.dir, Logger: opts.Logger})
	if err != nil {
		return fmt.Errorf("--data-dir %s: %w", f.dir, err)
	}
	if f.checkConfig {
		_, err := st.Load()
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--data-dir %s: %w", f.dir, err)
		}
		return nil
	}
	key, err := store.ResetKey(f.dir)
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("--data-dir %s: %w", f.dir, err)
	}
	opts.Store = st
	opts.StatelessResetKey = key // clients of the last run reconnect at once
	brokerDataDir = f.dir
	return nil
}
