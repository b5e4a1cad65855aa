package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quiot/quiot/probe/model"
)

// TestMain lets tests run the test binary as ovsprobe itself (a real
// process, for signals and exit codes): with OVSPROBE_RUN_MAIN=1 it behaves
// as main.
func TestMain(m *testing.M) {
	if os.Getenv("OVSPROBE_RUN_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no command", nil, 2, ""},
		{"help", []string{"help"}, 0, ""},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"bad flag", []string{"fit", "--nope"}, 2, "unknown flag --nope"},
		{"fit without in", []string{"fit"}, 2, "--in DIR is required"},
		{"fit missing dir", []string{"fit", "--in", "/nonexistent-dir"}, 1, "no such file"},
		{"fit bad response", []string{"fit", "--in", "testdata", "--out", "/dev/null", "--response", "p42"}, 1, "unknown response"},
		{"predict without model", []string{"predict", "--size", "1", "--rate", "1", "--flows", "1"}, 2, "--model is required"},
		{"predict without size", []string{"predict", "--model", "x"}, 2, "--size, --rate and --flows are required"},
		{"predict bad mem", []string{"predict", "--model", "x", "--size", "1", "--rate", "1", "--flows", "1", "--mem", "lots"}, 2, "--mem"},
		{"predict missing model", []string{"predict", "--model", "/nonexistent.json", "--size", "64", "--rate", "1", "--flows", "1"}, 1, "read model"},
		{"measure without dst", []string{"measure", "--ingress", "lo", "--egress", "lo"}, 2, "--dst IP:PORT is required"},
		{"measure bad dst", []string{"measure", "--ingress", "lo", "--egress", "lo", "--dst", "10.0.0.1"}, 2, "is not IP:PORT"},
		{"measure bad mem label", []string{"measure", "--ingress", "lo", "--egress", "lo", "--dst", "10.0.0.1:9", "--mem", "lots"}, 2, "--rules, --mem and --cpus"},
		{"measure negative rules label", []string{"measure", "--ingress", "lo", "--egress", "lo", "--dst", "10.0.0.1:9", "--rules", "-1"}, 2, "--rules, --mem and --cpus"},
		{"lab bad sizes", []string{"lab", "--sizes", "12,x"}, 2, "--sizes"},
		{"lab size out of range", []string{"lab", "--sizes", "9000"}, 2, "out of range"},
		{"lab bad log level", []string{"lab", "--log-level", "loud"}, 2, "bad --log-level"},
		{"extra args", []string{"version", "extra"}, 2, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.wantCode, stderr)
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Fatalf("stderr %q lacks %q", stderr, tt.wantErr)
			}
		})
	}
}

func TestFitPredict(t *testing.T) {
	out := filepath.Join(t.TempDir(), "model.json")
	code, stdout, stderr := runCmd("fit", "--in", "testdata", "--out", out)
	if code != 0 {
		t.Fatalf("fit: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "held-out R^2") {
		t.Fatalf("fit output: %s", stdout)
	}
	m, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.R2 < 0.9 || m.FloorUS != 6 || m.OVSVersion != "3.1.0" {
		t.Fatalf("model from fixture: r2 %v floor %v version %q", m.R2, m.FloorUS, m.OVSVersion)
	}
	// The fixture follows 20 + 0.01*size + 1.5*rate_kpps + 3*ln(flows) + 0.002*rules (+15 cold).
	tests := []struct {
		name  string
		args  []string
		want  float64
		extra bool
	}{
		{"baseline", []string{"--size", "512", "--rate", "5000", "--flows", "16"}, 20 + 5.12 + 7.5 + 3*2.7726, false},
		{"rules", []string{"--size", "128", "--rate", "10000", "--flows", "1", "--rules", "2000"}, 20 + 1.28 + 15 + 4, false},
		{"extrapolated rate", []string{"--size", "128", "--rate", "50000", "--flows", "1"}, 20 + 1.28 + 75, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(append([]string{"predict", "--model", out, "--json"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("predict: exit %d: %s", code, stderr)
			}
			var got struct {
				Value        float64  `json:"value_us"`
				Extrapolated []string `json:"extrapolated"`
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("predict output %q: %v", stdout, err)
			}
			tol := 3 * m.RMSEus
			if tt.extra {
				tol = 0.15 * tt.want // extrapolation: a looser check
			}
			if d := got.Value - tt.want; d > tol || d < -tol {
				t.Fatalf("predicted %.2f, want %.2f +- %.2f", got.Value, tt.want, tol)
			}
			if (len(got.Extrapolated) > 0) != tt.extra {
				t.Fatalf("extrapolated = %v", got.Extrapolated)
			}
		})
	}
	code, stdout, _ = runCmd("predict", "--model", out, "--size", "512", "--rate", "5000", "--flows", "16")
	if code != 0 || !strings.HasPrefix(stdout, "p50_us = ") {
		t.Fatalf("text predict: %d %q", code, stdout)
	}
}

func TestFitReport(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/conditions.csv")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conditions.csv"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd("fit", "--in", dir, "--report"); code != 0 {
		t.Fatalf("fit --report: %s", stderr)
	}
	for _, f := range []string{"model.json", "report.md", "delay_vs_size.png", "fitted_vs_measured.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false}, {"unlimited", 0, false}, {"1024", 1024, false}, {"64M", 64 << 20, false},
		{"64MiB", 64 << 20, false}, {"1.5G", 3 << 29, false}, {"2k", 2048, false}, {"100B", 100, false},
		{"x", 0, true}, {"-1", 0, true}, {"M", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseBytes(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("parseBytes(%q) = %d, %v", tt.in, got, err)
			}
		})
	}
}
