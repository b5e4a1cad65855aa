//go:build !arm && !nobench

package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown profile", []string{"--profiles", "mars"}, `unknown link profile "mars"`},
		{"unknown protocol", []string{"--protos", "coap"}, `unknown protocol "coap"`},
		{"unknown mode", []string{"--modes", "burst"}, `unknown publish mode "burst"`},
		{"unknown study", []string{"--study", "latency"}, `--study "latency"`},
		{"unknown knob", []string{"--study", "tuning", "--knobs", "turbo"}, `unknown knob "turbo"`},
		{"unknown tuning", []string{"--tunings", "lean/bogus=1"}, `unknown tuning variant`},
		{"bad payloads", []string{"--payloads", "big"}, `bad payload size "big"`},
		{"bad qos", []string{"--qos", "2"}, "qos 2"},
		{"stray argument", []string{"now"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"--out", t.TempDir()}, tt.args...)
			err := runBench(context.Background(), args, &out, &errOut)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tt.want)
			}
		})
	}
}
