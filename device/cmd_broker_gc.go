package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/quiot/quiot/internal/gctune"
)

// Garbage collector settings of `quiot broker` (internal/gctune): the MQTT
// broker allocates per delivered message, and Go's default heap target
// (GOGC=100) makes it collect every few thousand deliveries.

type gcFlags struct {
	fs      *flag.FlagSet
	percent int
	limit   string
	opts    gctune.Options // what options made, applied when the broker starts
}

func (f *gcFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	fs.IntVar(&f.percent, "gc-percent", gctune.DefaultPercent, "Go GC percent (as GOGC): collect when the heap has grown this much over the live heap; -1 = only at --memory-limit (if not given, a GOGC environment variable wins)")
	fs.StringVar(&f.limit, "memory-limit", "auto", "soft limit of the broker's Go memory, e.g. 128MiB; auto = a quarter of RAM within 64 MiB..1 GiB (or GOMEMLIMIT if set); off = none")
}

// options turns the flags into gctune.Options: a flag left at its default
// leaves the choice to gctune (which lets GOGC/GOMEMLIMIT win). It runs
// after the configuration file is read, so its values count as given.
func (f *gcFlags) options() (gctune.Options, error) {
	given := map[string]bool{}
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	}
	var o gctune.Options
	if given["gc-percent"] {
		if f.percent == 0 {
			return o, errors.New("--gc-percent 0 would collect continuously: give a positive value, or -1 for collections only at --memory-limit")
		}
		o.Percent = f.percent
	}
	lim, err := gctune.ParseSize(f.limit)
	if err != nil {
		return o, fmt.Errorf("--memory-limit: %w", err)
	}
	o.MemoryLimit = lim
	if o.Percent < 0 && lim < 0 {
		return o, errors.New("--gc-percent -1 needs a memory limit: the heap would grow without bound")
	}
	return o, nil
}
