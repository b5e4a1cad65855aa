//go:build !arm && !nobench

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quiot/quiot/device/bench"
)

// TestBenchSpecFromFlags checks the matrix and workload each preset gives
// and that flags override them.
func TestBenchSpecFromFlags(t *testing.T) {
	link, err := bench.NewImpairLink()
	if err != nil {
		t.Fatal(err)
	}
	unset := benchPreset{rate: -1}
	tests := []struct {
		name       string
		presetName string
		study      string
		quick      bool
		over       benchPreset
		wantTitle  string
		want       string // protos modes profiles payloads tunings repeat count rate inflight
	}{
		{"full", "", "", false, unset, "",
			"[h3 mqtt] [request stream] [lan wifi ltem nbiot lossy] [16 256 1024] [default lean] 5 100 5 4"},
		{"quick", "", "", true, unset, "",
			"[h3 mqtt] [request stream] [lan nbiot] [256] [lean] 2 10 5 4"},
		{"study preset", "study", "", false, unset, "quiot bench: HTTP/3 vs MQTT over QUIC, the study preset",
			"[h3 mqtt] [request stream] [lan wifi ltem nbiot lossy sat] [256] [default lean] 5 50 5 4"},
		{"quick with flags", "", "", true,
			benchPreset{protos: "h3", modes: "stream", profiles: "wifi", payloads: "64", tunings: "default", repeat: 1, count: 3, rate: 0, inflight: 2}, "",
			"[h3] [stream] [wifi] [64] [default] 1 3 0 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			preset, title, knobList, err := choosePreset(tc.presetName, tc.study, "", tc.quick)
			if err != nil {
				t.Fatal(err)
			}
			if title != tc.wantTitle || knobList != nil {
				t.Fatalf("title %q, knobs %v; want %q, none", title, knobList, tc.wantTitle)
			}
			spec, err := benchSpec(preset, tc.over, 1, knobList, link)
			if err != nil {
				t.Fatal(err)
			}
			var tunings []string
			for _, tu := range spec.Tunings {
				tunings = append(tunings, tu.Name)
			}
			got := fmt.Sprint(spec.Protos, " ", spec.Modes, " ", spec.Profiles, " ", spec.Payloads, " ", tunings, " ",
				spec.Repeat, " ", spec.Count, " ", spec.Rate, " ", spec.Inflight)
			if got != tc.want || spec.QoS != 1 {
				t.Fatalf("spec %s (qos %d)\nwant %s (qos 1)", got, spec.QoS, tc.want)
			}
		})
	}
	t.Run("tuning study", func(t *testing.T) {
		preset, title, knobList, err := choosePreset("", "tuning", "", false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(title, "tuning study") || len(knobList) == 0 {
			t.Fatalf("title %q, %d knobs", title, len(knobList))
		}
		spec, err := benchSpec(preset, unset, 1, knobList, link)
		if err != nil {
			t.Fatal(err)
		}
		if want := bench.KnobTunings(knobList); len(spec.Tunings) != len(want) || spec.Tunings[0].Name != want[0].Name {
			t.Fatalf("tunings %v, want the knobs' %v", spec.Tunings, want)
		}
	})
}
