package main

import (
	"flag"
	"fmt"

	"github.com/quiot/quiot/internal/proctune"
)

// Processors of `quiot broker` (internal/proctune): by default its Go code
// runs on one processor while its load fits well within a core, where
// fewer wake-ups make the same work cheaper, and on every core when it
// does not.

type procsFlags struct {
	value string
	mode  proctune.Mode // what value made, applied when the broker starts
}

func (f *procsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.value, "procs", "auto", "processors running the broker's Go code (GOMAXPROCS): auto = all at start, one after 3 s under 40% of a core, all again at 75% (a GOMAXPROCS environment variable wins); all = every core; or a number")
}

// parse checks --procs; it runs after the configuration file is read.
func (f *procsFlags) parse() error {
	m, err := proctune.ParseMode(f.value)
	if err != nil {
		return fmt.Errorf("--procs: %w", err)
	}
	f.mode = m
	return nil
}

// applyProcs is proctune.Apply; the package's tests, which run many
// brokers in one process beside each other, leave GOMAXPROCS to the test
// binary (main_test.go).
var applyProcs = proctune.Apply
