package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/cli"
)

func brokerFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("quiot broker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("listen", ":4433", "")
	fs.String("metrics-listen", "127.0.0.1:9464", "")
	fs.Bool("dev", false, "")
	fs.Int("max-subs", 100, "")
	fs.Float64("rate", 1, "")
	fs.Duration("idle", time.Minute, "")
	fs.String("protos", "h3", "")
	fs.String(FlagName, DefaultPath, "")
	fs.Int("max-payload", 256<<10, "")
	fs.Int64("history-bytes", 16<<20, "")
	cli.SizeFlags(fs, "max-payload", "history-bytes")
	return fs
}

func write(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "quiot.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApply(t *testing.T) {
	const file = `# quiot
[broker]
listen = ":5555"
metrics-listen = "0.0.0.0:9100"
dev = true
max-subs = 7
rate = 2.5
idle = "30s"
protos = ["h3", "mqtt"]
max-payload = "1k"
history-bytes = "128MiB"

[pub]
broker = "https://x:4433"
nonsense-for-broker = 1
`
	tests := []struct {
		name string
		args []string
		want map[string]string
	}{
		{"file only", nil, map[string]string{
			"listen": ":5555", "metrics-listen": "0.0.0.0:9100", "dev": "true",
			"max-subs": "7", "rate": "2.5", "idle": "30s", "protos": "h3,mqtt"}},
		{"sizes", []string{"--history-bytes", "2M"}, map[string]string{
			"max-payload": "1024", "history-bytes": "2097152"}},
		{"flags win", []string{"--listen", ":1", "--dev=false"}, map[string]string{
			"listen": ":1", "dev": "false", "max-subs": "7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, file)
			fs := brokerFlags()
			if err := fs.Parse(append(tc.args, "--config", path)); err != nil {
				t.Fatal(err)
			}
			if err := ApplyFlag(fs, "broker"); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got := fs.Lookup(k).Value.String(); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		wantLine int
		wantIn   []string
	}{
		{"unknown key", "[broker]\nlisten = \":1\"\n\nlisten-typo = \"x\"\n", 4, []string{`key "listen-typo"`, "unknown key"}},
		{"mistyped key", "[broker]\nmetrics-listn = \":1\"\n", 2, []string{`key "metrics-listn"`, "unknown key", "did you mean metrics-listen?"}},
		{"bad size", "[broker]\n\nmax-payload = \"1kx\"\n", 3, []string{`key "max-payload"`, `invalid value "1kx"`, `unknown unit "kx"`, "256k, 256KiB", "plain bytes"}},
		{"negative size", "[broker]\nmax-payload = -5\n", 2, []string{`key "max-payload"`, `invalid value "-5"`, "plain bytes"}},
		{"bad int", "[broker]\n# c\nmax-subs = \"many\"\n", 3, []string{`key "max-subs"`, "invalid value"}},
		{"bad duration", "[broker]\nidle = 5\n", 2, []string{`key "idle"`, "invalid value"}},
		{"bad bool", "[broker]\n\ndev = \"maybe\"\n", 3, []string{`key "dev"`}},
		{"unknown table", "[broker]\nlisten=\":1\"\n[brokr]\nlisten = \":2\"\n", 3, []string{"[brokr]", "unknown table"}},
		{"top-level key", "listen = \":1\"\n", 1, []string{`key "listen"`, "outside a table"}},
		{"syntax", "[broker]\nlisten = \":1\"\ndev = tru\n", 3, []string{"quiot.toml:3"}},
		{"table value", "[broker]\n[broker.listen]\nx = 1\n", 2, []string{`key "listen"`, "table is not allowed"}},
		{"config key", "[broker]\nconfig = \"/x\"\n", 2, []string{`key "config"`, "not allowed"}},
		{"quoted key", "[broker]\n\"lissen\" = \":1\"\n", 2, []string{`key "lissen"`}},
		{"dotted key", "[broker]\n\nlisten.port = 1\n", 3, []string{`key "listen"`, "table is not allowed"}},
		{"array of tables", "[broker]\ndev = true\n[[pub]]\ntopic = \"x\"\n", 3, []string{"[[pub]]", "array of tables"}},
		{"bridge table", "[broker]\ndev = true\n[bridge]\nname = \"x\"\n", 3, []string{"[bridge]", "write [[bridge]]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, tc.file)
			fs := brokerFlags()
			if err := fs.Parse([]string{"--config", path}); err != nil {
				t.Fatal(err)
			}
			err := ApplyFlag(fs, "broker")
			if err == nil {
				t.Fatal("no error")
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is %T, want *Error", err, err)
			}
			if ce.Line != tc.wantLine {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.wantLine, err)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestApplyFlagMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.toml")
	t.Run("default path absent is fine", func(t *testing.T) {
		fs := brokerFlags()
		fs.Lookup(FlagName).DefValue = missing
		if err := fs.Lookup(FlagName).Value.Set(missing); err != nil {
			t.Fatal(err)
		}
		// Set marks nothing as visited: Value.Set bypasses fs.Set.
		if err := ApplyFlag(fs, "broker"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("explicit path absent is an error", func(t *testing.T) {
		fs := brokerFlags()
		if err := fs.Parse([]string{"--config", missing}); err != nil {
			t.Fatal(err)
		}
		err := ApplyFlag(fs, "broker")
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("empty --config disables the file", func(t *testing.T) {
		fs := brokerFlags()
		if err := fs.Parse([]string{"--config="}); err != nil {
			t.Fatal(err)
		}
		if err := ApplyFlag(fs, "broker"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no config flag", func(t *testing.T) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		if err := ApplyFlag(fs, "broker"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestExampleFile checks that build/systemd/quiot.toml, the documented example,
// parses and that every key it sets exists in its table.
func TestExampleFile(t *testing.T) {
	data, err := os.ReadFile("../../build/config/quiot.toml")
	if err != nil {
		t.Fatalf("the example config is part of the repo: %v", err)
	}
	if _, err := Parse("quiot.toml", data); err != nil {
		t.Fatal(err)
	}
	// Every documented key, uncommented, must parse too.
	re := regexp.MustCompile(`(?m)^# ([a-z0-9-]+ = .*)$`)
	live := re.ReplaceAll(data, []byte("$1"))
	tables, err := Parse("quiot.toml (uncommented)", live)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Sections {
		if len(tables[s]) == 0 {
			t.Errorf("example documents no key of [%s]", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("[broker]\nlisten = \":4433\"\n"))
	f.Add([]byte("[pub]\nrate = 1.5\ncount = 10\nprotos = [\"a\", 1]\n"))
	f.Add([]byte("x = 1\n[a.b]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Parse("f", data)
		fs := brokerFlags()
		_ = ApplyData(fs, "broker", "f", data)
	})
}

// TestBridgeTablesLeftAlone: [[bridge]] tables (broker/bridge reads them)
// pass Parse and do not touch the role's flags.
func TestBridgeTablesLeftAlone(t *testing.T) {
	path := write(t, "[broker]\nlisten = \":7\"\n\n[[bridge]]\nname = \"cloud\"\nurl = \"mqtt://h\"\n\n[[bridge]]\nname = \"b\"\n")
	fs := brokerFlags()
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyFlag(fs, "broker"); err != nil {
		t.Fatal(err)
	}
	if v := fs.Lookup("listen").Value.String(); v != ":7" {
		t.Fatalf("listen = %q", v)
	}
}
