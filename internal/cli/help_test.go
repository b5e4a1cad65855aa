package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestClosestFlag(t *testing.T) {
	fs := flag.NewFlagSet("prog cmd", flag.ContinueOnError)
	for _, n := range []string{"listen", "mqtt-listen", "max-payload", "max-conns", "dev", "n"} {
		fs.Bool(n, false, "")
	}
	tests := []struct {
		typed, want string // want "" = no suggestion
	}{
		{"lisen", "listen"},
		{"listne", "listen"},
		{"mqtt-lisen", "mqtt-listen"},
		{"max-paylod", "max-payload"},
		{"max-con", "max-conns"},
		{"dve", "dev"},
		{"x", ""},          // too short to guess
		{"verbose", ""},    // nothing close
		{"completely", ""}, // nothing close
		{"max-payloads", "max-payload"},
	}
	for _, tt := range tests {
		t.Run(tt.typed, func(t *testing.T) {
			got, ok := closestFlag(fs, tt.typed)
			if !ok {
				got = ""
			}
			if got != tt.want {
				t.Errorf("closestFlag(%q) = %q, want %q", tt.typed, got, tt.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"lisen", "listen", 1},
		{"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"same", "same", 0}, {"dve", "dev", 1}, {"ca", "abc", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestMistypedFlag: a mistyped flag is one line with a suggestion and a
// hint, exit status 2, never the whole flag list.
func TestMistypedFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"flags", "--lisen", ":1"}, "prog flags: unknown flag --lisen; did you mean --listen?\nRun 'prog flags -h' for the list of flags.\n"},
		{[]string{"flags", "-max-paylod=3"}, "prog flags: unknown flag --max-paylod; did you mean --max-payload?\nRun 'prog flags -h' for the list of flags.\n"},
		{[]string{"flags", "--zzzzzz"}, "prog flags: unknown flag --zzzzzz\nRun 'prog flags -h' for the list of flags.\n"},
		{[]string{"flags", "--listen"}, "prog flags: flag --listen needs a value\nRun 'prog flags -h' for the list of flags.\n"},
		{[]string{"flags", "--n", "x"}, "prog flags: invalid value \"x\" for --n: parse error\nRun 'prog flags -h' for the list of flags.\n"},
		{[]string{"flags", "--dev=maybe"}, "prog flags: invalid boolean value \"maybe\" for --dev: parse error\nRun 'prog flags -h' for the list of flags.\n"},
		{[]string{"flags", "--n", "1", "extra"}, "prog flags: unexpected arguments: extra\nRun 'prog flags -h' for the list of flags.\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := testApp().Main(tt.args, &out, &errb); got != 2 {
				t.Errorf("status %d, want 2", got)
			}
			if errb.String() != tt.want {
				t.Errorf("stderr:\n%s\nwant:\n%s", errb.String(), tt.want)
			}
		})
	}
}

// TestHelpCommand: "help CMD" prints CMD's -h text on stdout.
func TestHelpCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if got := testApp().Main([]string{"help", "flags"}, &out, &errb); got != 0 {
		t.Fatalf("status %d (stderr %q)", got, errb.String())
	}
	for _, want := range []string{"Usage: prog flags [flags]", "--max-payload int", "--listen string"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help flags lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Commands:") {
		t.Errorf("help flags printed the command list:\n%s", out.String())
	}
	out.Reset()
	if got := testApp().Main([]string{"help"}, &out, &errb); got != 0 || !strings.Contains(out.String(), "Commands:") {
		t.Errorf("help: status %d, stdout %q", got, out.String())
	}
	errb.Reset()
	if got := testApp().Main([]string{"help", "nope"}, &out, &errb); got != 2 || !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Errorf("help nope: status %d, stderr %q", got, errb.String())
	}
	out.Reset()
	if got := testApp().Main([]string{"help", "ok", "fail"}, &out, &errb); got != 2 || out.Len() != 0 {
		t.Errorf("help ok fail: status %d, stdout %q", got, out.String())
	}
}

func TestWriteUsageGroups(t *testing.T) {
	fs := NewFlagSet("prog", "serve", &bytes.Buffer{})
	fs.String("listen", ":4433", "address")
	fs.Bool("dev", false, "development mode")
	fs.Int("max-conns", 0, "connections (0 = 1024)")
	fs.Int("stray", 3, "in no group")
	h := Help{
		Groups: []Group{
			{Title: "Listeners", Flags: []string{"listen", "not-in-this-build"}},
			{Title: "Limits", Flags: []string{"max-conns"}},
			{Title: "Security", Flags: []string{"dev"}},
		},
		Examples: []Example{{Comment: "a dev server", Command: "prog serve --dev"}},
	}
	var b bytes.Buffer
	WriteUsage(&b, fs, h)
	want := `Usage: prog serve [flags]

Listeners:
  --listen string
        address (default :4433)

Limits:
  --max-conns int
        connections (0 = 1024)

Security:
  --dev
        development mode

Other flags:
  --stray int
        in no group (default 3)

Examples:
  # a dev server
  prog serve --dev
`
	if b.String() != want {
		t.Errorf("usage:\n%s\nwant:\n%s", b.String(), want)
	}

	// Without groups every flag is under "Flags", sorted.
	b.Reset()
	WriteUsage(&b, fs, Help{})
	if !strings.Contains(b.String(), "\nFlags:\n  --dev\n") || strings.Contains(b.String(), "Other flags") {
		t.Errorf("ungrouped usage:\n%s", b.String())
	}
}

// TestSetHelpUsedByParse: -h prints the layout SetHelp gave.
func TestSetHelpUsedByParse(t *testing.T) {
	var errb bytes.Buffer
	fs := NewFlagSet("prog", "serve", &errb)
	fs.String("listen", ":1", "address")
	SetHelp(fs, Help{Groups: []Group{{Title: "Listeners", Flags: []string{"listen"}}}})
	if err := ParseFlags(fs, []string{"-h"}); err != flag.ErrHelp {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(errb.String(), "Listeners:\n  --listen string") {
		t.Errorf("help:\n%s", errb.String())
	}
}

func TestDefaultsRendering(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("s", "info", "level")
	fs.String("empty", "", "file (empty = none)")
	fs.Int("zero", 0, "conns (0 = 1024)")
	fs.Int("n", 1024, "queue")
	fs.Int("neg", -1, "rate (-1 = the preset's)")
	fs.Bool("off", false, "switch")
	fs.Bool("on", true, "switch")
	fs.Duration("d", 5*time.Second, "grace")
	fs.Duration("d0", 0, "timeout (0 = 2m)")
	fs.Float64("f", 0.5, "ratio")
	fs.Int("size", 256<<10, "largest payload")
	fs.Int64("size0", 0, "bytes (0 = 16MiB)")
	fs.Int("odd", 1000, "bytes")
	fs.String("q", "", "a `FILE` to read")
	SizeFlags(fs, "size", "size0", "odd")
	tests := []struct {
		name, line, help string
	}{
		{"s", "-s string", "level (default info)"},
		{"empty", "--empty string", "file (empty = none)"},
		{"zero", "--zero int", "conns (0 = 1024)"},
		{"n", "-n int", "queue (default 1024)"},
		{"neg", "--neg int", "rate (-1 = the preset's) (default -1)"},
		{"off", "--off", "switch"},
		{"on", "--on", "switch (default true)"},
		{"d", "-d duration", "grace (default 5s)"},
		{"d0", "--d0 duration", "timeout (0 = 2m)"},
		{"f", "-f float", "ratio (default 0.5)"},
		{"size", "--size size", "largest payload (default 256KiB)"},
		{"size0", "--size0 size", "bytes (0 = 16MiB)"},
		{"odd", "--odd size", "bytes (default 1000)"},
		{"q", "-q FILE", "a FILE to read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fs.Lookup(tt.name)
			if got := flagLine(f); got != tt.line {
				t.Errorf("line %q, want %q", got, tt.line)
			}
			if got := FlagHelp(f); got != tt.help {
				t.Errorf("help %q, want %q", got, tt.help)
			}
		})
	}
}

func TestWrapKeepsPhrases(t *testing.T) {
	// "(default cccc)" is 14 bytes, longer than the width: a line of its own.
	got := wrap("aaaa bbbb (0 = 1024) (default cccc)", 12)
	want := []string{"aaaa bbbb", "(0 = 1024)", "(default cccc)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("wrap = %q, want %q", got, want)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"262144", 262144, ""},
		{"1k", 1024, ""},
		{"1K", 1024, ""},
		{"1kb", 1024, ""},
		{"1KiB", 1024, ""},
		{"256KiB", 256 << 10, ""},
		{"128MiB", 128 << 20, ""},
		{"16M", 16 << 20, ""},
		{"16 MiB", 16 << 20, ""},
		{"1G", 1 << 30, ""},
		{"1GiB", 1 << 30, ""},
		{"12B", 12, ""},
		{" 64k ", 64 << 10, ""},
		{"", 0, "want plain bytes"},
		{"k", 0, "want plain bytes"},
		{"-1", 0, "want plain bytes"},
		{"1.5M", 0, "unknown unit"},
		{"1kx", 0, `unknown unit "kx"`},
		{"1T", 0, "unknown unit"},
		{"99999999999G", 0, "out of range"},
		{"99999999999999999999", 0, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error with %q", tt.in, got, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), "256KiB") && !strings.Contains(err.Error(), "out of range") {
					t.Errorf("error %q does not name the accepted forms", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1KiB", 256 << 10: "256KiB", 16 << 20: "16MiB", 3 << 30: "3GiB", 1536: "1536"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSizeFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n := fs.Int("max-payload", 256<<10, "")
	m := fs.Int64("bytes", 0, "")
	fs.Func("small", "", func(s string) error {
		if len(s) > 3 {
			return errors.New("too big")
		}
		return nil
	})
	other := fs.Int("other", 0, "")
	SizeFlags(fs, "max-payload", "bytes", "small", "not-a-flag")
	SizeFlags(fs, "bytes") // twice is harmless
	for _, tc := range []struct {
		name, val string
		p         func() int64
		want      int64
		wantErr   string
	}{
		{"max-payload", "1k", func() int64 { return int64(*n) }, 1024, ""},
		{"max-payload", "2048", func() int64 { return int64(*n) }, 2048, ""},
		{"bytes", "128MiB", func() int64 { return *m }, 128 << 20, ""},
		{"max-payload", "lots", nil, 0, "want plain bytes"},
		{"small", "1M", nil, 0, "out of range"}, // the flag's own type refuses 1048576
	} {
		err := fs.Set(tc.name, tc.val)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Set(%s, %q) = %v, want error with %q", tc.name, tc.val, err, tc.wantErr)
			}
			continue
		}
		if err != nil || tc.p() != tc.want {
			t.Errorf("Set(%s, %q): %v, value %d, want %d", tc.name, tc.val, err, tc.p(), tc.want)
		}
	}
	if err := fs.Set("other", "1k"); err == nil {
		t.Errorf("--other is not a size flag but took 1k (value %d)", *other)
	}
	if got := fs.Lookup("max-payload").Value.String(); got != "2048" {
		t.Errorf("String() = %q", got)
	}
}
