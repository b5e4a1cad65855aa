package bench

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/quictune"
)

func TestKnobTuningsParse(t *testing.T) {
	ts := KnobTunings(StudyKnobs())
	if ts[0].Name != "lean" {
		t.Fatalf("first tuning %q, want lean", ts[0].Name)
	}
	dir := t.TempDir()
	written, err := writeTunings(dir, ts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tu := range written {
		t.Run(tu.Name, func(t *testing.T) {
			p, err := quictune.Load(tu.Profile)
			if err != nil {
				t.Fatalf("profile %s: %v", tu.Profile, err)
			}
			if tu.Knob == "max_incoming_streams" && tu.Value == "10" && p.MaxIncomingStreams != 10 {
				t.Errorf("max_incoming_streams = %d", p.MaxIncomingStreams)
			}
			if tu.Knob == "cipher" && len(tu.Env) == 0 {
				t.Error("cipher variant without environment")
			}
		})
	}
}

func TestResolveTunings(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mine.toml")
	if err := os.WriteFile(f, []byte("max_incoming_streams = 50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ResolveTunings([]string{"default", "lean", "lean/pmtud=on", f})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[2].Knob != "pmtud" || got[3].Name != "mine" || got[3].Profile != f {
		t.Errorf("got %+v", got)
	}
	for _, bad := range []string{"lean/nope=1", "fast"} {
		if _, err := ResolveTunings([]string{bad}); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
	if _, err := SelectKnobs([]string{"cipher", "bogus"}); err == nil {
		t.Error("no error for an unknown knob")
	}
}

func TestWriteTuningDoc(t *testing.T) {
	sum, samples, links := synthetic(3, true)
	// Make the variant clearly worse on wire bytes in every group.
	for i := range samples {
		if samples[i].Tuning == "lean/max_incoming_streams=10" {
			samples[i].Metrics.WireBytes *= 2
		}
	}
	sum.Runs = Aggregate(samples)
	knobs, err := SelectKnobs([]string{"max_incoming_streams"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "TUNING.md")
	if d := os.Getenv("QUIOT_BENCH_REPORT_DIR"); d != "" {
		path = filepath.Join(d, "TUNING.md") // keep it for a look
	}
	if err := WriteTuningDoc(path, knobs, &Result{Summary: sum, Samples: samples, Links: links}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{"## Recommendations", "MaxIncomingStreams", "**1000 (lean, unchanged)**", "10: worse, wire_bytes_per_msg +"} {
		if !strings.Contains(doc, want) {
			t.Errorf("TUNING.md lacks %q", want)
		}
	}
}

func TestSelectKnobsDefault(t *testing.T) {
	def, err := SelectKnobs(nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := SelectKnobs([]string{"all"})
	nd, na := len(KnobTunings(def)), len(KnobTunings(all))
	if nd >= na || nd < 8 {
		t.Errorf("default study has %d tunings, all %d", nd, na)
	}
	for _, k := range def {
		if k.ID == "idle_timeout" {
			t.Error("idle_timeout has only extended values but is in the default study")
		}
	}
}

func TestWriteTuningDocAuthColumns(t *testing.T) {
	sum, samples, links := synthetic(3, true)
	var extra []Sample
	for i := range samples {
		s := &samples[i]
		if s.Tuning != "lean" || s.Proto != ProtoH3 {
			continue
		}
		s.Diag["pub.diag.trace.h3_header_bytes_sent"] = 20 * 10
		v := *s
		v.Tuning = "lean/auth=per-request"
		v.Diag = maps.Clone(s.Diag)
		v.Diag["pub.diag.trace.h3_header_bytes_sent"] = 20 * 64
		extra = append(extra, v)
	}
	samples = append(samples, extra...)
	sum.Runs = Aggregate(samples)
	knobs, err := SelectKnobs([]string{"auth"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "TUNING.md")
	if err := WriteTuningDoc(path, knobs, &Result{Summary: sum, Samples: samples, Links: links}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{"## Per-connection vs per-request authentication", "pub HEADERS B/msg sent", "| per-request |", "| 64.0 |", "| 10.0 |", "**per-connection (the client's default"} {
		if !strings.Contains(doc, want) {
			t.Errorf("TUNING.md lacks %q", want)
		}
	}
	if strings.Contains(doc, "is not measured") {
		t.Error("TUNING.md says per-request authentication is not measured although the auth knob ran")
	}
}
