package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/gctune"
)

func TestBrokerGCFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want gctune.Options
		err  string
	}{
		{"defaults leave the choice to gctune", nil, gctune.Options{}, ""},
		{"given", []string{"--gc-percent", "200", "--memory-limit", "96MiB"}, gctune.Options{Percent: 200, MemoryLimit: 96 << 20}, ""},
		{"off with auto limit", []string{"--gc-percent", "-1"}, gctune.Options{Percent: -1}, ""},
		{"no limit", []string{"--memory-limit", "off"}, gctune.Options{MemoryLimit: -1}, ""},
		{"zero percent", []string{"--gc-percent", "0"}, gctune.Options{}, "collect continuously"},
		{"off without limit", []string{"--gc-percent", "-1", "--memory-limit", "off"}, gctune.Options{}, "without bound"},
		{"bad size", []string{"--memory-limit", "lots"}, gctune.Options{}, "--memory-limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("broker", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := gcFlags{fs: fs}
			fs.IntVar(&f.percent, "gc-percent", gctune.DefaultPercent, "")
			fs.StringVar(&f.limit, "memory-limit", "auto", "")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o, err := f.options()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("options() = %+v, %v; want error with %q", o, err, tc.err)
				}
				return
			}
			if err != nil || o.Percent != tc.want.Percent || o.MemoryLimit != tc.want.MemoryLimit {
				t.Fatalf("options() = %+v, %v; want %+v", o, err, tc.want)
			}
		})
	}
}
