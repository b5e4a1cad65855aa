package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpCommand: "quiot help pub" prints pub's help, as "quiot pub -h"
// does, not the list of commands.
func TestHelpCommand(t *testing.T) {
	for _, cmd := range []string{"pub", "sub", "broker"} {
		t.Run(cmd, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run([]string{"help", cmd}, &out, &errb); code != 0 {
				t.Fatalf("status %d, stderr %q", code, errb.String())
			}
			var h bytes.Buffer
			if code := run([]string{cmd, "-h"}, io.Discard, &h); code != 0 {
				t.Fatalf("%s -h: status %d", cmd, code)
			}
			if !strings.HasPrefix(out.String(), "Usage: quiot "+cmd+" [flags]\n") || out.String() != h.String() {
				t.Errorf("quiot help %s:\n%s\nwant what quiot %s -h prints:\n%s", cmd, out.String(), cmd, h.String())
			}
			if strings.Contains(out.String(), "Commands:") {
				t.Errorf("quiot help %s printed the command list", cmd)
			}
		})
	}
	var out bytes.Buffer
	if code := run([]string{"help"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "Commands:") {
		t.Errorf("quiot help: status %d, output %q", code, out.String())
	}
}

// TestMistypedFlag: a mistyped flag is one line naming the closest flag and
// a pointer to -h, exit status 2, not the whole flag list.
func TestMistypedFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"broker", "--lisen", ":1"}, "quiot broker: unknown flag --lisen; did you mean --listen?\nRun 'quiot broker -h' for the list of flags.\n"},
		{[]string{"broker", "--max-paylod", "1k"}, "quiot broker: unknown flag --max-paylod; did you mean --max-payload?\nRun 'quiot broker -h' for the list of flags.\n"},
		{[]string{"pub", "--brokr", "https://x"}, "quiot pub: unknown flag --brokr; did you mean --broker?\nRun 'quiot pub -h' for the list of flags.\n"},
		{[]string{"sub", "--nothing-like-it"}, "quiot sub: unknown flag --nothing-like-it\nRun 'quiot sub -h' for the list of flags.\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, &out, &errb); code != 2 {
				t.Errorf("status %d, want 2", code)
			}
			if errb.String() != tt.want {
				t.Errorf("stderr:\n%s\nwant:\n%s", errb.String(), tt.want)
			}
		})
	}
}

// TestBrokerHelpGroups: quiot broker -h lists its flags under headings, in
// order, and ends with examples.
func TestBrokerHelpGroups(t *testing.T) {
	var errb bytes.Buffer
	if code := run([]string{"broker", "-h"}, io.Discard, &errb); code != 0 {
		t.Fatalf("status %d", code)
	}
	help := errb.String()
	last := -1
	for _, h := range []string{"\nListeners:\n", "\nSecurity and authentication:\n", "\nLimits:\n", "\nMQTT sessions:\n",
		"\nStorage and history:\n", "\nCluster (docs/cluster.md):\n", "\nMetrics and logging:\n", "\nTuning:\n",
		"\nConfiguration:\n", "\nExamples:\n"} {
		i := strings.Index(help, h)
		if i < 0 {
			t.Errorf("broker -h lacks heading %q", strings.TrimSpace(h))
			continue
		}
		if i < last {
			t.Errorf("heading %q out of order", strings.TrimSpace(h))
		}
		last = i
	}
	if strings.Contains(help, "\nOther flags:\n") {
		t.Errorf("broker -h has ungrouped flags (add them to flagLayouts in flaghelp.go):\n%s", help[strings.Index(help, "\nOther flags:\n"):])
	}
	for _, ex := range []string{"quiot broker --dev\n", "--auth /etc/quiot/acl.toml", "--mqtt-tls :8883 --mqtt-tcp"} {
		if !strings.Contains(help, ex) {
			t.Errorf("broker -h examples lack %q", ex)
		}
	}
	// The listeners come first, under their heading.
	if !regexp.MustCompile(`\nListeners:\n  --listen string\n`).MatchString(help) {
		t.Errorf("--listen is not first under Listeners:\n%s", help)
	}
}

// TestFlagLayoutsNameRealFlags: every name in flagLayouts and sizeFlags is a
// flag of its command, so a renamed flag does not silently leave a group.
func TestFlagLayoutsNameRealFlags(t *testing.T) {
	flags := func(cmd string) map[string]bool {
		var errb bytes.Buffer
		run([]string{cmd, "-h"}, io.Discard, &errb)
		m := map[string]bool{}
		for _, s := range regexp.MustCompile(`(?m)^  --?([A-Za-z0-9-]+)`).FindAllStringSubmatch(errb.String(), -1) {
			m[s[1]] = true
		}
		return m
	}
	for cmd, h := range flagLayouts {
		have := flags(cmd)
		for _, g := range h.Groups {
			for _, n := range g.Flags {
				if !have[n] {
					t.Errorf("flagLayouts[%s] group %q names --%s, not a flag of quiot %s", cmd, g.Title, n, cmd)
				}
			}
		}
	}
	for cmd, names := range sizeFlags {
		have := flags(cmd)
		for _, n := range names {
			if !have[n] {
				t.Errorf("sizeFlags[%s] names --%s, not a flag of quiot %s", cmd, n, cmd)
			}
		}
	}
}

// TestFlagHelpConvention: every command writes defaults one way (see
// internal/cli's doc): the printer's "(default V)" at the end, "0 = X"
// or "empty = X" in the text; never "(0: X)", "(default: X)" or a default
// spelt out in the text.
func TestFlagHelpConvention(t *testing.T) {
	cmds := [][]string{{"certs", "ca"}, {"certs", "device", "NAME"}}
	for _, n := range app.Names() {
		if n != "certs" {
			cmds = append(cmds, []string{n})
		}
	}
	bad := regexp.MustCompile(`\(default[:\s]|\(0:|[;,] 0: |defaults? to |DESIGN\.md`)
	// Flag lines and their indented text (either dash style, so the test
	// reads any layout of the help).
	flagLine := regexp.MustCompile(`^  --?[A-Za-z0-9-]+`)
	for _, c := range cmds {
		t.Run(strings.Join(c, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			run(append(c, "-h"), &out, &errb)
			help := out.String() + errb.String()
			var blocks []string
			for _, l := range strings.Split(help, "\n") {
				switch {
				case flagLine.MatchString(l):
					blocks = append(blocks, l+":")
				case (strings.HasPrefix(l, "        ") || strings.HasPrefix(l, "    \t")) && len(blocks) > 0:
					blocks[len(blocks)-1] += " " + strings.TrimSpace(l)
				}
			}
			if len(blocks) == 0 {
				t.Fatalf("no flags in:\n%s", help)
			}
			for _, b := range blocks {
				text := regexp.MustCompile(` \(default [^()]*\)$`).ReplaceAllString(b, "")
				if m := bad.FindString(text); m != "" {
					t.Errorf("%q: %q is not the convention ((default V) from the printer; 0 = X, empty = X in the text)", b, m)
				}
			}
		})
	}
}

// TestConfigSizes: byte sizes are written the same way in the
// configuration file as on the command line ("1k", "128MiB", bytes); a
// bad one names the key and the accepted forms.
func TestConfigSizes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := "[broker]\ndev = true\nlisten = \"127.0.0.1:0\"\nmetrics-listen = \"127.0.0.1:0\"\nmqtt-quic = \"\"\n"
	good := write("good.toml", base+"max-payload = \"1k\"\nhistory-bytes = \"128MiB\"\nretained-bytes = 1048576\nmqtt-max-queued-bytes = \"4 MiB\"\n")
	var out, errb bytes.Buffer
	if code := run([]string{"broker", "--config", good, "--check-config", "--log-level", "error"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "configuration OK") {
		t.Fatalf("status %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	errb.Reset()
	bad := write("bad.toml", base+"max-payload = \"1kx\"\n")
	if code := run([]string{"broker", "--config", bad, "--check-config"}, io.Discard, &errb); code == 0 {
		t.Fatal("1kx accepted")
	}
	for _, want := range []string{`bad.toml:6: [broker] key "max-payload": invalid value "1kx"`, "256KiB", "16MiB"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}

	// The values reach the flags: the same parse as quiot broker's (its
	// core flags only).
	fs := newFlagSet("broker", io.Discard)
	var bf brokerFlags
	bf.register(fs)
	sizes := write("sizes.toml", "[broker]\nmax-payload = \"1k\"\nhistory-bytes = \"128MiB\"\nretained-bytes = 1048576\n")
	if err := parseFlags(fs, []string{"--config", sizes, "--history-bytes", "2M"}); err != nil {
		t.Fatal(err)
	}
	if bf.maxPayload != 1024 || bf.historyBytes != 2<<20 || bf.retainedBytes != 1<<20 {
		t.Errorf("max-payload %d, history-bytes %d, retained-bytes %d; want 1024, 2MiB (command line wins), 1MiB",
			bf.maxPayload, bf.historyBytes, bf.retainedBytes)
	}
}

// TestBrokerURLSchemes: the help of --broker names every scheme the
// clients accept: https:// (HTTP/3), mqtt-quic://, mqtts:// and mqtt://.
func TestBrokerURLSchemes(t *testing.T) {
	for _, cmd := range []string{"pub", "sub"} {
		t.Run(cmd, func(t *testing.T) {
			var out bytes.Buffer
			if code := run([]string{cmd, "-h"}, io.Discard, &out); code != 0 {
				t.Fatalf("status %d", code)
			}
			// The --broker line and its text, up to the next flag.
			block := regexp.MustCompile(`(?s)\n  --?broker string\n(.*?)(\n  -|$)`).FindStringSubmatch(out.String())
			if block == nil {
				t.Fatalf("no --broker in:\n%s", out.String())
			}
			for _, s := range []string{"https://", "mqtt-quic://", "mqtts://", "mqtt://"} {
				if !strings.Contains(block[1], s) {
					t.Errorf("--broker help lacks %s:\n%s", s, block[1])
				}
			}
		})
	}
}
