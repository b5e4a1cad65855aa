package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/config"
)

// The bridges of `quiot broker`: the [[bridge]] tables of its
// configuration file (docs/bridge.md). A table with an error stops the
// broker before it starts, naming the bridge and the key. SIGHUP reads the
// tables again (broker/node, bridge.Manager.Reload: unchanged bridges keep
// running); the ACL's reload gets the same signal.

type bridgeFlags struct {
	path string // the configuration file ("" none)
	cfgs []bridge.Config
}

// parsed reads the [[bridge]] tables of the file --config names (a missing
// file at the default path means no bridges, as for the [broker] table).
func (f *bridgeFlags) parsed(fs *flag.FlagSet) error {
	fl := fs.Lookup(config.FlagName)
	if fl == nil || fl.Value.String() == "" {
		return nil
	}
	path := fl.Value.String()
	explicit := false
	fs.Visit(func(v *flag.Flag) { explicit = explicit || v.Name == config.FlagName })
	if _, err := os.Stat(path); !explicit && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	cfgs, err := bridge.LoadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	f.cfgs, f.path = cfgs, path
	return nil
}
