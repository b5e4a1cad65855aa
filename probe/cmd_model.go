package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/quiot/quiot/internal/version"
	"github.com/quiot/quiot/probe/lab"
	"github.com/quiot/quiot/probe/model"
	"github.com/quiot/quiot/probe/ovs"
)

func init() {
	register(command{name: "fit", summary: "fit the delay model to DIR/conditions.csv, write model.json", run: runFit})
	register(command{name: "predict", summary: "predict the delay of a condition from model.json", run: runPredict})
	register(command{name: "version", summary: "print ovsprobe's version and the local Open vSwitch's", run: runVersion})
}

func runFit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fit", "--in DIR [--out model.json]", stderr)
	in := fs.String("in", "", "directory holding conditions.csv (from lab or measure) (required)")
	out := fs.String("out", "", "model file to write (default DIR/model.json)")
	response := fs.String("response", "p50_us", "statistic to model: "+strings.Join(lab.Responses, ", "))
	seed := fs.Uint64("seed", 1, "seed of the cross-validation folds")
	report := fs.Bool("report", false, "also rewrite DIR/report.md, the plots, distributions/index.csv and simcheck.csv (simulator tables vs samples)")
	resummarize := fs.Bool("resummarize", false, "recompute each condition's statistics and CIs from DIR/samples/ with the block bootstrap and rewrite conditions.csv (implies --report)")
	resamples := fs.Int("resamples", 500, "bootstrap replicates per condition for --resummarize")
	transform := fs.String("transform", "auto", "response transform: auto (none or log, the better held-out RMSE), none, log (relative errors: one saturated condition does not dominate)")
	bootstrap := fs.Int("bootstrap", 0, "bootstrap replicates of the model selection for coefficient CIs (default 200; negative: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *in == "" {
		return fmt.Errorf("%w: --in DIR is required", errUsage)
	}
	if *out == "" {
		*out = filepath.Join(*in, "model.json")
	}
	var m *model.Model
	if *report || *resummarize {
		if err := lab.Analyze(*in, lab.AnalyzeOptions{Response: *response, Seed: *seed, ModelPath: *out, Resummarize: *resummarize, Resamples: *resamples, Bootstrap: *bootstrap, Transform: *transform}); err != nil {
			return err
		}
		var err error
		if m, err = model.Load(*out); err != nil {
			return err
		}
	} else {
		rows, err := lab.ReadRows(filepath.Join(*in, "conditions.csv"))
		if err != nil {
			return err
		}
		m, _, err = lab.FitRowsOptions(rows, model.FitOptions{Response: *response, Seed: *seed, Bootstrap: *bootstrap, Transform: *transform})
		if err != nil {
			return err
		}
		if err := m.Save(*out); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "model of %s over %d conditions (terms chosen by %d-fold cross-validation)\n", m.Response, m.NConditions, m.Folds)
	for _, t := range m.Terms {
		sel := ""
		if m.Bootstrap != nil && t != model.Intercept {
			sel = fmt.Sprintf("  selected in %.0f%% of %d bootstrap replicates", 100*m.Bootstrap.Selected[t], m.Bootstrap.Replicates)
		}
		ci, ok := m.CI95[t]
		if ok {
			fmt.Fprintf(stdout, "  %-28s %12.5g  95%% CI [%.5g, %.5g]%s\n", t, m.Coefficients[t], ci[0], ci[1], sel)
		} else {
			fmt.Fprintf(stdout, "  %-28s %12.5g%s\n", t, m.Coefficients[t], sel)
		}
	}
	fmt.Fprintln(stdout, heldOut(m))
	fmt.Fprintf(stdout, "in-sample R^2 %.3f; floor %.1f us\nwrote %s\n", m.R2Train, m.FloorUS, *out)
	for _, n := range m.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return nil
}

func runPredict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("predict", "--model model.json --size B --rate PPS --flows N [--mem BYTES] [--rules N] [--cpus C] [--cold]", stderr)
	path := fs.String("model", "", "model file from lab or fit (required)")
	size := fs.Int("size", 0, "frame size in bytes (required)")
	rate := fs.Float64("rate", 0, "offered rate in packets/s (required)")
	flows := fs.Int("flows", 0, "number of flows (required)")
	mem := fs.String("mem", "0", "memory limit of ovs-vswitchd in bytes (K/M/G suffixes; 0 = unlimited)")
	rules := fs.Int("rules", 0, "extra OpenFlow rules above the forwarding rules")
	cpus := fs.Float64("cpus", 0, "CPU quota of ovs-vswitchd in cores (0 = unlimited)")
	cold := fs.Bool("cold", false, "cold datapath cache (first packets take the upcall path)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	if *size <= 0 || *rate <= 0 || *flows <= 0 {
		return fmt.Errorf("%w: --size, --rate and --flows are required and must be positive", errUsage)
	}
	if *rules < 0 || *cpus < 0 {
		return fmt.Errorf("%w: --rules and --cpus must not be negative", errUsage)
	}
	memBytes, err := parseBytes(*mem)
	if err != nil {
		return fmt.Errorf("%w: --mem: %v", errUsage, err)
	}
	m, err := model.Load(*path)
	if err != nil {
		return err
	}
	x := lab.FactorValues(lab.Condition{Size: *size, Rate: *rate, Flows: *flows, Rules: *rules, MemBytes: memBytes, CPUs: *cpus, Cold: *cold})
	y, err := m.Predict(x)
	if err != nil {
		return err
	}
	extra := m.Extrapolates(x)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"response": m.Response, "value_us": y, "factors": x, "rmse_us": m.RMSEus, "r2": m.R2,
			"floor_us": m.FloorUS, "extrapolated": extra,
		})
	}
	fmt.Fprintf(stdout, "%s = %.2f us (held-out RMSE %.2f us, R^2 %.3f; probe floor %.1f us)\n", m.Response, y, m.RMSEus, m.R2, m.FloorUS)
	if len(extra) > 0 {
		fmt.Fprintf(stderr, "warning: extrapolating outside the measured range of %s\n", strings.Join(extra, ", "))
	}
	return nil
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ovsprobe %s\n", version.String())
	if _, err := exec.LookPath("ovs-vswitchd"); err != nil {
		fmt.Fprintln(stdout, "Open vSwitch: not installed")
		return nil
	}
	out, err := exec.CommandContext(ctx, "ovs-vswitchd", "--version").Output()
	if v, perr := ovs.ParseVersion(string(out)); err == nil && perr == nil {
		fmt.Fprintf(stdout, "Open vSwitch %s installed", v)
	}
	if v, err := (&ovs.Client{}).Version(ctx); err == nil {
		fmt.Fprintf(stdout, "; ovs-vswitchd %s running\n", v)
	} else {
		fmt.Fprintln(stdout, "; no system ovs-vswitchd running")
	}
	return nil
}

// heldOut describes the model's held-out figures in one line.
func heldOut(m *model.Model) string {
	cv := m.CV
	if cv == nil {
		return fmt.Sprintf("held-out R^2 %.3f, RMSE %.2f us", m.R2, m.RMSEus)
	}
	return fmt.Sprintf("held-out R^2 %.3f (sd %.3f, %.3f..%.3f), RMSE %.2f us (sd %.2f) by nested CV (%d outer folds x %d repeats); un-nested CV would say R^2 %.3f, RMSE %.2f us (optimism %+.3f R^2)",
		m.R2, cv.R2.SD, cv.R2.Min, cv.R2.Max, m.RMSEus, cv.RMSEus.SD, cv.OuterFolds, cv.Repeats, cv.InnerR2, cv.InnerRMSEus, cv.OptimismR2)
}
