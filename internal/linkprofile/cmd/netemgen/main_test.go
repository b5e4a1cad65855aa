package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string // substrings of the output
		wantErr string
	}{
		{"apply", []string{"-profile", "sat", "-dev", "eth0"}, []string{"# sat:", "tc qdisc del dev eth0 root", "tc qdisc add dev eth0 root netem delay 290ms 10ms loss gemodel 0.05% 20% 100% 0.3% rate 2000kbit", "tc qdisc add dev ifb0 root netem"}, ""},
		{"peer", []string{"-profile", "ltem", "-dev", "wlan0", "-ifb", "ifb3", "-peer", "198.51.100.7"}, []string{"match ip dst 198.51.100.7/32", "dev ifb3 parent 1:4 handle 40: netem delay 75ms 15ms loss random 1% rate 300kbit"}, ""},
		{"clear", []string{"-clear", "-dev", "eth0"}, []string{"tc qdisc del dev eth0 handle ffff: ingress", "ip link del ifb0"}, ""},
		{"list", []string{"-list"}, []string{"nbiot  NB-IoT", "(RTT 600ms)"}, ""},
		{"script", []string{"-script"}, []string{"#!/bin/sh", "shape() {", "\tnbiot) # NB-IoT"}, ""},
		{"no dev", []string{"-profile", "lan"}, nil, "need -profile and -dev"},
		{"clear without dev", []string{"-clear"}, nil, "-clear needs -dev"},
		{"unknown profile", []string{"-profile", "x", "-dev", "eth0"}, nil, "unknown link profile"},
		{"bad profiles file", []string{"-profiles", "/nonexistent", "-list"}, nil, "read link profiles"},
		{"bad flag", []string{"-bogus"}, nil, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := run(tt.args, &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	path := filepath.Join(t.TempDir(), "netem.sh")
	if err := run([]string{"-script", "-o", path}, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("script file: %v, %v", fi, err)
	}
}
