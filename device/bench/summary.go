package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"
)

// SummaryRun is one configuration in summary.json: its metrics are medians
// over the successful repeats, Repeat is how many there were.
type SummaryRun struct {
	// Proto, Tuning, Profile, Payload and Mode identify the configuration
	// (see Config).
	Proto   string `json:"proto"`
	Tuning  string `json:"tuning"`
	Profile string `json:"profile"`
	Payload int    `json:"payload"`
	Mode    string `json:"publish_mode"`
	// Repeat is the number of successful repeats the medians are over.
	Repeat int `json:"repeat"`
	// Metrics are the eight metrics, medians over the repeats.
	Metrics Metrics `json:"metrics"`
	// Diag are the diagnostics (flattened keys), medians over the repeats,
	// with "sent", "received" and "runs_failed".
	Diag map[string]float64 `json:"diag"`
}

// Config returns the run's configuration.
func (r *SummaryRun) Config() Config {
	return Config{Proto: r.Proto, Tuning: r.Tuning, Profile: r.Profile, Payload: r.Payload, Mode: r.Mode}
}

// Host describes the machine the bench ran on.
type Host struct {
	// Hostname, OS, Arch, CPUs, CPUModel and Go describe the machine and
	// the toolchain of the bench process.
	Hostname string `json:"hostname"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	Go       string `json:"go"`
}

// Summary is summary.json.
type Summary struct {
	Runs    []SummaryRun `json:"runs"`
	Host    Host         `json:"host"`
	Version string       `json:"version"`
	// Partial is true when the bench was interrupted or a run failed; the
	// runs present are valid, but the matrix is incomplete.
	Partial       bool   `json:"partial"`
	PartialReason string `json:"partial_reason,omitempty"`
	// Started and Finished bound the bench in wall-clock time.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Workload is the per-run workload.
	Workload Workload `json:"workload"`
	// Tunings are the tuning configurations used, by name.
	Tunings []Tuning `json:"tunings,omitempty"`
}

// Workload is the per-run publisher workload.
type Workload struct {
	Count  int     `json:"count"`
	Rate   float64 `json:"rate"`
	QoS    int     `json:"qos"`
	Repeat int     `json:"repeat"`
	// Inflight is the publisher's window of unacknowledged publishes.
	Inflight int `json:"inflight"`
}

// Aggregate groups samples by configuration, in first-seen order, and
// returns one summary run per configuration with at least one successful
// repeat: medians of every metric and diagnostic over those repeats; the
// number of failed repeats goes to diag "runs_failed".
func Aggregate(samples []Sample) []SummaryRun {
	var order []Config
	groups := map[Config][]Sample{}
	failed := map[Config]int{}
	for _, s := range samples {
		if _, ok := groups[s.Config]; !ok {
			if _, ok := failed[s.Config]; !ok {
				order = append(order, s.Config)
			}
		}
		if !s.OK {
			failed[s.Config]++
			if _, ok := groups[s.Config]; !ok {
				groups[s.Config] = nil
			}
			continue
		}
		groups[s.Config] = append(groups[s.Config], s)
	}
	out := []SummaryRun{} // [] rather than null in summary.json
	for _, c := range order {
		g := groups[c]
		if len(g) == 0 {
			continue
		}
		r := SummaryRun{Proto: c.Proto, Tuning: c.Tuning, Profile: c.Profile, Payload: c.Payload, Mode: c.Mode, Repeat: len(g), Diag: map[string]float64{}}
		for _, f := range MetricFields {
			xs := make([]float64, len(g))
			for i := range g {
				xs[i] = f.Get(&g[i].Metrics)
			}
			f.Set(&r.Metrics, Median(xs))
		}
		for _, k := range diagKeys(g) {
			var xs []float64
			for _, s := range g {
				if v, ok := s.Diag[k]; ok {
					xs = append(xs, v)
				}
			}
			r.Diag[k] = Median(xs)
		}
		var sent, recv []float64
		for _, s := range g {
			sent = append(sent, float64(s.Sent))
			recv = append(recv, float64(s.Received))
		}
		r.Diag["sent"] = Median(sent)
		r.Diag["received"] = Median(recv)
		r.Diag["runs_failed"] = float64(failed[c])
		out = append(out, r)
	}
	return out
}

// HostInfo describes this machine.
func HostInfo() Host {
	h := Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	h.Hostname, _ = os.Hostname()
	h.CPUModel = cpuModel()
	return h
}

// cpuModel reads the CPU model name from /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	return parseCPUModel(string(b))
}

// WriteSummary writes s as indented JSON to path.
func WriteSummary(path string, s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("couldn't encode summary: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("couldn't write summary: %w", err)
	}
	return nil
}

// ReadSummary reads a summary.json.
func ReadSummary(path string) (*Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("couldn't read summary: %w", err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("bad summary %s: %w", path, err)
	}
	return &s, nil
}
