package lab

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/quiot/quiot/probe/model"
	"github.com/quiot/quiot/probe/stats"
)

// Row is one line of conditions.csv: a condition's factors, delay
// statistics (microseconds, with bootstrap 95 % CIs; boot_block is the
// block length in packets of the block bootstrap behind them, 1 = packets
// treated as independent, 0 or absent = unknown, as in files written
// before the block bootstrap), probe counters, OVS counters over the
// condition and ovs-vswitchd's resource use.
type Row struct {
	Condition
	// Repeat numbers the measurements of one condition from 1.
	Repeat    int
	DurationS float64
	// Probe counters (measured phase).
	Sent, Matched, Lost, Duplicated, Reordered, IngressRingDrops, EgressRingDrops uint64
	FirstDelayUS                                                                  float64
	Stats                                                                         stats.Summary
	// OVS counters: datapath hit/missed/lost increase during the condition,
	// datapath flows and OpenFlow rules at its end, PMD counter increases.
	DPHit, DPMissed, DPLost, DPFlows, OFRules uint64
	EMCHits, SMCHits, MegaflowHits, Upcalls   float64
	VswitchdCPUPct                            float64
	VswitchdRSSBytes, VswitchdPeakRSS         int64
	CgroupMemBytes, HostMemAvailBytes         int64
	HostLoad1                                 float64
	Datapath, OVSVersion                      string
	// Error says why the condition has no measurement (e.g. ovs-vswitchd
	// died under its memory limit); "" for a measured condition.
	Error string
}

// columns of conditions.csv, in order.
var columns = []string{
	"id", "path", "size_bytes", "rate_pps", "flows", "rules", "mem_bytes", "cpus", "cold", "repeat", "duration_s",
	"sent", "matched", "lost", "duplicated", "reordered", "ingress_ring_drops", "egress_ring_drops", "first_delay_us",
	"n", "min_us", "min_lo", "min_hi", "p50_us", "p50_lo", "p50_hi", "p99_us", "p99_lo", "p99_hi",
	"p999_us", "p999_lo", "p999_hi", "pdv_us", "pdv_lo", "pdv_hi", "mean_us", "mean_lo", "mean_hi", "max_us",
	"dp_hit", "dp_missed", "dp_lost", "dp_flows", "of_rules", "emc_hits", "smc_hits", "megaflow_hits", "upcalls",
	"vswitchd_cpu_pct", "vswitchd_rss_bytes", "vswitchd_peak_rss_bytes", "cgroup_mem_bytes", "host_mem_avail_bytes",
	"host_load1", "datapath", "ovs_version", "boot_block", "error",
}

func f64(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
func u64(v uint64) string  { return strconv.FormatUint(v, 10) }
func i64(v int64) string   { return strconv.FormatInt(v, 10) }
func b01(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

func r3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func (r Row) record() []string {
	s := r.Stats
	return []string{
		r.ID, r.Path, strconv.Itoa(r.Size), f64(r.Rate), strconv.Itoa(r.Flows), strconv.Itoa(r.Rules), i64(r.MemBytes), f64(r.CPUs), b01(r.Cold), strconv.Itoa(max(r.Repeat, 1)), r3(r.DurationS),
		u64(r.Sent), u64(r.Matched), u64(r.Lost), u64(r.Duplicated), u64(r.Reordered), u64(r.IngressRingDrops), u64(r.EgressRingDrops), r3(r.FirstDelayUS),
		strconv.Itoa(s.N), r3(s.Min), r3(s.MinCI.Lo), r3(s.MinCI.Hi), r3(s.P50), r3(s.P50CI.Lo), r3(s.P50CI.Hi), r3(s.P99), r3(s.P99CI.Lo), r3(s.P99CI.Hi),
		r3(s.P999), r3(s.P999CI.Lo), r3(s.P999CI.Hi), r3(s.PDV), r3(s.PDVCI.Lo), r3(s.PDVCI.Hi), r3(s.Mean), r3(s.MeanCI.Lo), r3(s.MeanCI.Hi), r3(s.Max),
		u64(r.DPHit), u64(r.DPMissed), u64(r.DPLost), u64(r.DPFlows), u64(r.OFRules), f64(r.EMCHits), f64(r.SMCHits), f64(r.MegaflowHits), f64(r.Upcalls),
		r3(r.VswitchdCPUPct), i64(r.VswitchdRSSBytes), i64(r.VswitchdPeakRSS), i64(r.CgroupMemBytes), i64(r.HostMemAvailBytes),
		f64(r.HostLoad1), r.Datapath, r.OVSVersion, strconv.Itoa(s.Block), r.Error,
	}
}

// RowWriter writes conditions.csv one row at a time, flushing each, so a
// run that is stopped keeps the rows done so far.
type RowWriter struct {
	f *os.File
	w *csv.Writer
}

// CreateRows creates path and writes the header.
func CreateRows(path string) (*RowWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create conditions file: %w", err)
	}
	w := &RowWriter{f: f, w: csv.NewWriter(f)}
	if err := w.write(columns); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func (w *RowWriter) write(rec []string) error {
	if err := w.w.Write(rec); err != nil {
		return fmt.Errorf("write conditions file: %w", err)
	}
	w.w.Flush()
	if err := w.w.Error(); err != nil {
		return fmt.Errorf("write conditions file: %w", err)
	}
	return nil
}

// Write appends one row.
func (w *RowWriter) Write(r Row) error { return w.write(r.record()) }

// Close closes the file.
func (w *RowWriter) Close() error { return w.f.Close() }

// ReadRows reads a conditions.csv (columns by header name, so files with
// extra or reordered columns still load).
func ReadRows(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read conditions: %w", err)
	}
	defer f.Close()
	return ParseRows(f)
}

// ParseRows parses conditions.csv content.
func ParseRows(rd io.Reader) ([]Row, error) {
	cr := csv.NewReader(rd)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("conditions file is empty")
		}
		return nil, fmt.Errorf("conditions header: %w", err)
	}
	idx := map[string]int{}
	for i, h := range header {
		idx[h] = i
	}
	for _, need := range []string{"id", "path", "size_bytes", "rate_pps", "flows", "p50_us"} {
		if _, ok := idx[need]; !ok {
			return nil, fmt.Errorf("conditions file has no %q column", need)
		}
	}
	var rows []Row
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("conditions line %d: %w", line, err)
		}
		p := rowParser{rec: rec, idx: idx}
		var r Row
		r.ID, r.Path = p.str("id"), p.str("path")
		r.Size = int(p.float("size_bytes"))
		r.Rate = p.float("rate_pps")
		r.Flows = int(p.float("flows"))
		r.Rules = int(p.float("rules"))
		r.MemBytes = int64(p.float("mem_bytes"))
		r.CPUs = p.float("cpus")
		r.Cold = p.float("cold") != 0
		r.Repeat = max(int(p.float("repeat")), 1)
		r.DurationS = p.float("duration_s")
		r.Sent, r.Matched, r.Lost = uint64(p.float("sent")), uint64(p.float("matched")), uint64(p.float("lost"))
		r.Duplicated, r.Reordered = uint64(p.float("duplicated")), uint64(p.float("reordered"))
		r.IngressRingDrops, r.EgressRingDrops = uint64(p.float("ingress_ring_drops")), uint64(p.float("egress_ring_drops"))
		r.FirstDelayUS = p.float("first_delay_us")
		s := &r.Stats
		s.N = int(p.float("n"))
		s.Min, s.MinCI = p.float("min_us"), stats.CI{Lo: p.float("min_lo"), Hi: p.float("min_hi")}
		s.P50, s.P50CI = p.float("p50_us"), stats.CI{Lo: p.float("p50_lo"), Hi: p.float("p50_hi")}
		s.P99, s.P99CI = p.float("p99_us"), stats.CI{Lo: p.float("p99_lo"), Hi: p.float("p99_hi")}
		s.P999, s.P999CI = p.float("p999_us"), stats.CI{Lo: p.float("p999_lo"), Hi: p.float("p999_hi")}
		s.PDV, s.PDVCI = p.float("pdv_us"), stats.CI{Lo: p.float("pdv_lo"), Hi: p.float("pdv_hi")}
		s.Mean, s.MeanCI = p.float("mean_us"), stats.CI{Lo: p.float("mean_lo"), Hi: p.float("mean_hi")}
		s.Max = p.float("max_us")
		s.Block = int(p.float("boot_block"))
		r.DPHit, r.DPMissed, r.DPLost = uint64(p.float("dp_hit")), uint64(p.float("dp_missed")), uint64(p.float("dp_lost"))
		r.DPFlows, r.OFRules = uint64(p.float("dp_flows")), uint64(p.float("of_rules"))
		r.EMCHits, r.SMCHits, r.MegaflowHits, r.Upcalls = p.float("emc_hits"), p.float("smc_hits"), p.float("megaflow_hits"), p.float("upcalls")
		r.VswitchdCPUPct = p.float("vswitchd_cpu_pct")
		r.VswitchdRSSBytes, r.VswitchdPeakRSS = int64(p.float("vswitchd_rss_bytes")), int64(p.float("vswitchd_peak_rss_bytes"))
		r.CgroupMemBytes, r.HostMemAvailBytes = int64(p.float("cgroup_mem_bytes")), int64(p.float("host_mem_avail_bytes"))
		r.HostLoad1 = p.float("host_load1")
		r.Datapath, r.OVSVersion = p.str("datapath"), p.str("ovs_version")
		r.Error = p.str("error")
		if p.err != nil {
			return nil, fmt.Errorf("conditions line %d: %w", line, p.err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

type rowParser struct {
	rec []string
	idx map[string]int
	err error
}

func (p *rowParser) str(col string) string {
	i, ok := p.idx[col]
	if !ok || i >= len(p.rec) {
		return ""
	}
	return p.rec[i]
}

func (p *rowParser) float(col string) float64 {
	s := p.str(col)
	if s == "" {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("column %s: bad number %q", col, s)
	}
	return v
}

// Factors are the model inputs derived from a row, in these units: frame
// size in bytes, rate in thousands of packets per second, flows, OpenFlow
// rules, memory limit in MiB (0 = unlimited), CPU quota in cores (0 =
// unlimited), cold (1) or warm (0).
var Factors = []string{"size_bytes", "rate_kpps", "flows", "rules", "mem_mib", "cpus", "cold"}

// FactorValues returns the model inputs of c.
func FactorValues(c Condition) map[string]float64 {
	return map[string]float64{
		"size_bytes": float64(c.Size),
		"rate_kpps":  c.Rate / 1000,
		"flows":      float64(c.Flows),
		"rules":      float64(c.Rules),
		"mem_mib":    float64(c.MemBytes) / (1 << 20),
		"cpus":       c.CPUs,
		"cold":       float64(b2i(c.Cold)),
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Responses are the statistics a model can be fitted to.
var Responses = []string{"p50_us", "p99_us", "p999_us", "mean_us", "min_us", "pdv_us"}

func response(r Row, name string) (float64, error) {
	switch name {
	case "p50_us":
		return r.Stats.P50, nil
	case "p99_us":
		return r.Stats.P99, nil
	case "p999_us":
		return r.Stats.P999, nil
	case "mean_us":
		return r.Stats.Mean, nil
	case "min_us":
		return r.Stats.Min, nil
	case "pdv_us":
		return r.Stats.PDV, nil
	}
	return 0, fmt.Errorf("unknown response %q (one of %v)", name, Responses)
}

// FitRows fits a model of the response ("" = p50_us) to the OVS rows with
// the default fit options and the given seed; see FitRowsOptions.
func FitRows(rows []Row, responseName string, seed uint64) (*model.Model, []model.Observation, error) {
	return FitRowsOptions(rows, model.FitOptions{Response: responseName, Seed: seed})
}

// FitRowsOptions fits a model of opts.Response ("" = p50_us) to the OVS
// rows (each condition's median repeat; opts.Factors nil = Factors); the
// floor row, when present, gives floor_us; datapath and OVS version come
// from the rows. Rows with no matched packets are skipped.
func FitRowsOptions(rows []Row, opts model.FitOptions) (*model.Model, []model.Observation, error) {
	if opts.Response == "" {
		opts.Response = "p50_us"
	}
	if opts.Factors == nil {
		opts.Factors = Factors
	}
	responseName := opts.Response
	var obs []model.Observation
	floor := -1.0
	var dp, ver string
	for _, r := range Representative(rows, responseName) {
		if r.Path == "floor" {
			floor = r.Stats.P50
			continue
		}
		if r.Stats.N == 0 {
			continue
		}
		y, err := response(r, responseName)
		if err != nil {
			return nil, nil, err
		}
		obs = append(obs, model.Observation{X: FactorValues(r.Condition), Y: y})
		if dp == "" {
			dp, ver = r.Datapath, r.OVSVersion
		}
	}
	if len(obs) == 0 {
		return nil, nil, errors.New("no OVS condition with measured packets to fit")
	}
	m, err := model.Fit(obs, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("fit: %w", err)
	}
	m.Datapath, m.OVSVersion = dp, ver
	if floor >= 0 {
		m.FloorUS = floor
	} else {
		m.Notes = append(m.Notes, "no floor row in the conditions: floor_us is 0")
	}
	return m, obs, nil
}

// AppendCondition adds r to DIR/conditions.csv (created with its header if
// missing) and writes its samples and distribution table; r.ID "" gets the
// next "mNNN". It is how `ovsprobe measure --out DIR` builds a conditions
// file, one invocation at a time, for `ovsprobe fit`.
func AppendCondition(dir string, r Row, delays []time.Duration) (Row, error) {
	for _, d := range []string{dir, filepath.Join(dir, "samples"), filepath.Join(dir, "distributions")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return r, fmt.Errorf("create output directory: %w", err)
		}
	}
	path := filepath.Join(dir, "conditions.csv")
	var existing []Row
	if _, err := os.Stat(path); err == nil {
		if existing, err = ReadRows(path); err != nil {
			return r, err
		}
	}
	if r.ID == "" {
		r.ID = fmt.Sprintf("m%03d", len(existing)+1)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return r, fmt.Errorf("open conditions file: %w", err)
	}
	w := &RowWriter{f: f, w: csv.NewWriter(f)}
	if existing == nil {
		if err := w.write(columns); err != nil {
			f.Close()
			return r, err
		}
	}
	if err := w.Write(r); err != nil {
		f.Close()
		return r, err
	}
	if err := f.Close(); err != nil {
		return r, fmt.Errorf("close conditions file: %w", err)
	}
	if err := writeSamples(filepath.Join(dir, "samples", r.FileID()+".csv"), delays); err != nil {
		return r, err
	}
	return r, writeDistribution(filepath.Join(dir, "distributions", r.FileID()+".csv"), stats.Micros(delays))
}

// FileID names the row's samples and distribution files: the condition's
// ID for its first measurement, ID-rN for repeat N.
func (r Row) FileID() string {
	if r.Repeat <= 1 {
		return r.ID
	}
	return fmt.Sprintf("%s-r%d", r.ID, r.Repeat)
}

// Representative returns one row per condition ID, in first-seen order: the
// repeat whose response is the median (the lower middle for an even
// count), so a measurement spoiled by a host stall does not stand for its
// condition.
func Representative(rows []Row, responseName string) []Row {
	if responseName == "" {
		responseName = "p50_us"
	}
	var order []string
	groups := map[string][]Row{}
	for _, r := range rows {
		if _, ok := groups[r.ID]; !ok {
			order = append(order, r.ID)
		}
		groups[r.ID] = append(groups[r.ID], r)
	}
	out := make([]Row, 0, len(order))
	for _, id := range order {
		g := groups[id]
		// A failed repeat (no packets) stands for its condition only when
		// every repeat failed.
		var ok []Row
		for _, r := range g {
			if r.Stats.N > 0 {
				ok = append(ok, r)
			}
		}
		if len(ok) > 0 {
			g = ok
		}
		sort.SliceStable(g, func(i, j int) bool {
			a, _ := response(g[i], responseName)
			b, _ := response(g[j], responseName)
			return a < b
		})
		out = append(out, g[(len(g)-1)/2])
	}
	return out
}
