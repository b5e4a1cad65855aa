package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/proctune"
)

func TestBrokerProcsFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want proctune.Mode
		err  string
	}{
		{"default: auto", nil, proctune.Mode{Auto: true}, ""},
		{"all", []string{"--procs", "all"}, proctune.Mode{}, ""},
		{"a number", []string{"--procs", "2"}, proctune.Mode{Fixed: 2}, ""},
		{"zero", []string{"--procs", "0"}, proctune.Mode{}, "--procs"},
		{"words", []string{"--procs", "lots"}, proctune.Mode{}, "want auto, all or a positive number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("broker", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f procsFlags
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := f.parse()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parse() = %v; want error with %q", err, tc.err)
				}
				return
			}
			if err != nil || f.mode != tc.want {
				t.Fatalf("parse() = %v, mode %v; want %v", err, f.mode, tc.want)
			}
		})
	}
}
