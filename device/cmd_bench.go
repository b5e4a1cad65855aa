//go:build !arm && !nobench

// `quiot bench` is left out of the 32-bit ARM (Pi) build and of -tags nobench: pibuild.go.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quiot/quiot/device/bench"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/version"
)

func init() {
	register(command{
		name:    "bench",
		summary: "run the HTTP/3 vs MQTT-over-QUIC experiment and write a report",
		run:     runBench,
	})
}

// benchPreset is a bench's default matrix and workload; flags override it.
type benchPreset struct {
	protos, modes, profiles, payloads, tunings string
	repeat, count, inflight                    int
	rate                                       float64
}

var (
	// fullPreset is `quiot bench` without --quick.
	fullPreset = benchPreset{protos: "h3,mqtt", modes: "request,stream", profiles: "lan,wifi,ltem,nbiot,lossy",
		payloads: "16,256,1024", tunings: "default,lean", repeat: 5, count: 100, rate: 5, inflight: 4}
	// quickPreset is `quiot bench --quick` (`make demo`): about 90 s on two
	// cores, so that `make demo` from a fresh clone (modules, build, demo)
	// ends within 3 minutes; 2 repeats, the full bench has 5.
	// nbiot runs take 10-15 s each (a 600 ms RTT, 20 kbit/s uplink and
	// handshake retransmissions), so the quick form compares the protocols
	// under the lean profile only; default vs lean is in the full bench and
	// the tuning study.
	quickPreset = benchPreset{protos: "h3,mqtt", modes: "request,stream", profiles: "lan,nbiot",
		payloads: "256", tunings: "lean", repeat: 2, count: 10, rate: 5, inflight: 4}
	// studyPreset is `quiot bench --study tuning`: every knob alone from
	// lean, on the poor links.
	// HTTP/3 request mode (where MAX_STREAMS matters) and MQTT, 3 repeats:
	// about 15 minutes on two cores.
	studyPreset = benchPreset{protos: "h3,mqtt", modes: "request", profiles: "nbiot,lossy",
		payloads: "256", repeat: 3, count: 10, rate: 5, inflight: 4}
	// comparisonPreset is `quiot bench --preset study` (issue 12): every
	// link profile x both protocols x both HTTP/3 modes x default and lean,
	// 50 messages, 5 repeats; bench.EstimateDuration puts it at about 44
	// minutes on two cores (docs/results/nbiot/ compares with measured
	// per-run times).
	comparisonPreset = benchPreset{protos: "h3,mqtt", modes: "request,stream", profiles: "lan,wifi,ltem,nbiot,lossy,sat",
		payloads: "256", tunings: "default,lean", repeat: 5, count: 50, rate: 5, inflight: 4}
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	presetName := fs.String("preset", "", `"study": the protocol comparison of issue 12 (all six link profiles, both protocols and HTTP/3 modes, default and lean, 256 B, 50 messages, 5 repeats; about 45 minutes)`)
	quick := fs.Bool("quick", false, "the quick comparison (make demo): lan and nbiot, 256 B, lean, 2 repeats, 10 messages a run")
	study := fs.String("study", "", `"tuning": vary one knob at a time from lean on nbiot and lossy and write TUNING.md`)
	knobs := fs.String("knobs", "", "with --study tuning: only these knobs, with all their values (comma-separated, or all; empty = the 15-minute selection)")
	protos := fs.String("protos", "", "protocols (empty = h3,mqtt)")
	modes := fs.String("modes", "", "HTTP/3 publish modes (empty = request,stream; study: request)")
	profiles := fs.String("profiles", "", "link profiles of lan,wifi,ltem,nbiot,lossy,sat (empty = lan,wifi,ltem,nbiot,lossy; quick: lan,nbiot; study: nbiot,lossy)")
	payloads := fs.String("payloads", "", "payload sizes in bytes (empty = 16,256,1024; quick and study: 256)")
	tunings := fs.String("tunings", "", "tunings: default, lean, study variants (lean/KNOB=VALUE) or TOML files (empty = default,lean; quick: lean)")
	repeat := fs.Int("repeat", 0, "repeats of every configuration (0 = 5; quick and study: 3)")
	count := fs.Int("count", 0, "messages per run (0 = 100; quick and study: 10)")
	rate := fs.Float64("rate", -1, "publish rate per run, messages per second (-1 = 5, the preset's; 0 = unpaced)")
	inflight := fs.Int("inflight", 0, "publishes awaiting acknowledgement at once per publisher (0 = 4)")
	linksFile := fs.String("links", "", "link profiles file (format of internal/linkprofile/profiles.toml; empty = the built-in profiles)")
	qos := fs.Int("qos", 1, "publish QoS (1 gives TTFD: the broker's acknowledgement)")
	out := fs.String("out", "", "output directory (empty = results/bench-TIMESTAMP)")
	bin := fs.String("quiot", "", "quiot binary the roles run as (empty = this one)")
	seed := fs.Uint64("seed", 1, "seed of the link emulators")
	reportOnly := fs.String("report", "", "only regenerate report.md (and TUNING.md) from an earlier bench directory")
	noProgress := fs.Bool("no-progress", false, "no progress bar")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	var link *bench.ImpairLink
	if *linksFile != "" {
		link, err = bench.LoadImpairLink(*linksFile)
	} else {
		link, err = bench.NewImpairLink()
	}
	if err != nil {
		return err
	}
	if *reportOnly != "" {
		return bench.Rereport(*reportOnly, link)
	}
	preset, title, knobList, err := choosePreset(*presetName, *study, *knobs, *quick)
	if err != nil {
		return err
	}
	over := benchPreset{protos: *protos, modes: *modes, profiles: *profiles, payloads: *payloads, tunings: *tunings,
		repeat: *repeat, count: *count, rate: *rate, inflight: *inflight}
	spec, err := benchSpec(preset, over, *qos, knobList, link)
	if err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("results", "bench-"+time.Now().UTC().Format("20060102-150405"))
	}
	opts := bench.Options{Spec: spec, Out: dir, Link: link, Binary: *bin, Logger: log, Version: version.String(), Seed: *seed, Title: title}
	if !*noProgress {
		opts.Progress = stderr
	}
	runs := len(spec.Expand())
	infos := map[string]bench.LinkInfo{}
	for _, p := range spec.Profiles {
		infos[p], _ = link.Info(p)
	}
	fmt.Fprintf(stderr, "quiot bench: %d runs (%d configurations x %d repeats), %d messages each, about %v -> %s\n",
		runs, len(spec.Configs()), spec.Repeat, spec.Count, bench.EstimateDuration(spec, infos).Round(time.Minute), dir)
	start := time.Now()
	res, err := bench.Run(ctx, opts)
	if res != nil && res.Summary != nil {
		if werr := writeBenchResults(stdout, res, knobList, dir, start); werr != nil {
			return werr
		}
		if err == nil {
			if werr := writeFloors(ctx, stdout, stderr, link, spec, res, dir, log); werr != nil {
				return werr
			}
		}
	}
	if errors.Is(err, bench.ErrInterrupted) {
		return fmt.Errorf("%v: partial results in %s", err, dir)
	}
	return err
}

// choosePreset picks the bench's preset from --preset, --study (with
// --knobs) and --quick, the report's title ("" for the default one) and,
// for the tuning study, its knobs.
func choosePreset(presetName, study, knobs string, quick bool) (preset benchPreset, title string, knobList []bench.Knob, err error) {
	preset = fullPreset
	switch {
	case study == "tuning":
		preset = studyPreset
		title = "quiot bench: the tuning study (one knob at a time from lean)"
		if knobList, err = bench.SelectKnobs(bench.ParseList(knobs)); err != nil {
			return preset, "", nil, fmt.Errorf("%w: --knobs: %v", errUsage, err)
		}
	case study != "":
		return preset, "", nil, fmt.Errorf("%w: --study %q (want tuning)", errUsage, study)
	case quick:
		preset = quickPreset
	}
	switch presetName {
	case "":
	case "study":
		if quick || study != "" {
			return preset, "", nil, fmt.Errorf("%w: --preset goes without --quick and --study", errUsage)
		}
		preset = comparisonPreset
		title = "quiot bench: HTTP/3 vs MQTT over QUIC, the study preset"
	default:
		return preset, "", nil, fmt.Errorf("%w: --preset %q (want study)", errUsage, presetName)
	}
	return preset, title, knobList, nil
}

// benchSpec is preset's matrix and workload with the flags' values in over
// put in its place: an empty string or zero count keeps the preset's, as
// does a negative rate. Without --tunings, the tuning study's knobs give
// the tunings. The spec must be valid and name only link's profiles.
func benchSpec(preset, over benchPreset, qos int, knobList []bench.Knob, link *bench.ImpairLink) (bench.Spec, error) {
	pick := func(flagVal, def string) string {
		if flagVal != "" {
			return flagVal
		}
		return def
	}
	spec := bench.Spec{
		Protos:   bench.ParseList(pick(over.protos, preset.protos)),
		Modes:    bench.ParseList(pick(over.modes, preset.modes)),
		Profiles: bench.ParseList(pick(over.profiles, preset.profiles)),
		Repeat:   preset.repeat,
		Count:    preset.count,
		Rate:     preset.rate,
		QoS:      qos,
		Inflight: preset.inflight,
	}
	if over.inflight != 0 {
		spec.Inflight = over.inflight
	}
	if over.repeat != 0 {
		spec.Repeat = over.repeat
	}
	if over.count != 0 {
		spec.Count = over.count
	}
	if over.rate >= 0 {
		spec.Rate = over.rate
	}
	var err error
	if spec.Payloads, err = bench.ParseSizes(pick(over.payloads, preset.payloads)); err != nil {
		return spec, fmt.Errorf("%w: --payloads: %v", errUsage, err)
	}
	if knobList != nil && over.tunings == "" {
		spec.Tunings = bench.KnobTunings(knobList)
	} else if spec.Tunings, err = bench.ResolveTunings(bench.ParseList(pick(over.tunings, preset.tunings))); err != nil {
		return spec, fmt.Errorf("%w: --tunings: %v", errUsage, err)
	}
	if err := spec.Validate(); err != nil {
		return spec, fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, p := range spec.Profiles {
		if _, ok := link.Info(p); !ok {
			return spec, fmt.Errorf("%w: unknown link profile %q (want one of %s)", errUsage, p, strings.Join(link.Names(), ", "))
		}
	}
	return spec, nil
}

// writeFloors measures each profile's floor after the matrix (two HTTP/3
// wake-ups in this process over the link emulator, with the first
// tuning's profile: bench.MeasureFloors), prints it with every
// configuration's TTFD as a multiple of it, and writes floors.json in dir.
func writeFloors(ctx context.Context, stdout, stderr io.Writer, link *bench.ImpairLink, spec bench.Spec, res *bench.Result, dir string, log *slog.Logger) error {
	var tun *quictune.Profile
	if len(spec.Tunings) > 0 {
		t := spec.Tunings[0]
		var err error
		if t.TOML != "" {
			tun, err = quictune.Parse([]byte(t.TOML), t.Name)
		} else {
			tun, err = quictune.Load(t.Profile)
		}
		if err != nil {
			fmt.Fprintf(stderr, "quiot bench: no floor: tuning %s: %v\n", t.Name, err)
			return nil
		}
	}
	payload := 256
	if len(spec.Payloads) > 0 {
		payload = spec.Payloads[0]
	}
	var floors []bench.Floors
	for _, p := range spec.Profiles {
		f, err := bench.MeasureFloors(ctx, link, p, tun, payload, log)
		if err != nil {
			fmt.Fprintf(stderr, "quiot bench: no floor: %v\n", err)
			continue
		}
		floors = append(floors, f)
	}
	if len(floors) == 0 {
		return nil
	}
	fmt.Fprintln(stdout)
	if err := bench.WriteFloors(stdout, floors, res.Summary, res.Samples); err != nil {
		return err
	}
	b, err := json.MarshalIndent(floors, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "floors.json"), append(b, '\n'), 0o644)
}

// writeBenchResults prints the bench's headline and protocol comparison,
// writes TUNING.md in dir for the tuning study (knobList set) and ends
// with the run count, the time since start and where the results are.
func writeBenchResults(w io.Writer, res *bench.Result, knobList []bench.Knob, dir string, start time.Time) error {
	fmt.Fprintln(w)
	if err := bench.WriteHeadline(w, res.Summary); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := bench.WriteComparison(w, res.Summary, res.Samples, res.Links); err != nil {
		return err
	}
	if knobList != nil {
		if err := bench.WriteTuningDoc(filepath.Join(dir, "TUNING.md"), knobList, res); err != nil {
			return err
		}
		fmt.Fprintf(w, "tuning study: %s\n", filepath.Join(dir, "TUNING.md"))
	}
	fmt.Fprintf(w, "\n%d runs in %s; results in %s (report.md, summary.json, runs.csv)\n",
		len(res.Samples), time.Since(start).Round(time.Second), dir)
	return nil
}
