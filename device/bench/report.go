package bench

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/quiot/quiot/internal/htmlreport"
)

// ReportInput is what a report is made from.
type ReportInput struct {
	// Summary is summary.json's content.
	Summary *Summary
	// Samples are every repeat (runs.csv), for confidence intervals.
	Samples []Sample
	// Links describes the link profiles by name (for RTTs); may be nil.
	Links map[string]LinkInfo
	// Dir is where report.md and the PNG plots go.
	Dir string
	// Title heads the report; empty means a default.
	Title string
}

// index groups successful samples by configuration.
type index map[Config][]Sample

func newIndex(samples []Sample) index {
	ix := index{}
	for _, s := range samples {
		if s.OK {
			ix[s.Config] = append(ix[s.Config], s)
		}
	}
	return ix
}

// values returns metric name's values over c's repeats. Names are metric
// fields, "wire_bytes_per_msg", "wire_datagrams_per_msg", or "diag.KEY".
func (ix index) values(c Config, name string) []float64 {
	var out []float64
	for i := range ix[c] {
		if v, ok := sampleValue(&ix[c][i], name); ok {
			out = append(out, v)
		}
	}
	return out
}

// sampleValue reads one named value of a sample.
func sampleValue(s *Sample, name string) (float64, bool) {
	if f, ok := metricByName(name); ok {
		return f.Get(&s.Metrics), true
	}
	switch name {
	case "wire_bytes_per_msg":
		return s.WireBytesPerMsg(), s.Sent > 0
	case "wire_datagrams_per_msg":
		if s.Sent == 0 {
			return 0, false
		}
		return float64(s.Metrics.WireDatagrams) / float64(s.Sent), true
	}
	if k, ok := strings.CutPrefix(name, "diag."); ok {
		v, ok := s.Diag[k]
		return v, ok
	}
	return 0, false
}

func (ix index) est(c Config, name string) Estimate { return CI95(ix.values(c, name)) }

// headlinePayload is the payload closest to 256 bytes among the runs.
func headlinePayload(runs []SummaryRun) int {
	best := 0
	for _, r := range runs {
		if best == 0 || math.Abs(math.Log(float64(r.Payload)/256)) < math.Abs(math.Log(float64(best)/256)) {
			best = r.Payload
		}
	}
	return best
}

// baseTunings are the tunings of runs that are not single-knob variants,
// in order of appearance.
func baseTunings(s *Summary) []string {
	knob := map[string]bool{}
	for _, t := range s.Tunings {
		if t.Knob != "" {
			knob[t.Name] = true
		}
	}
	var out []string
	for _, r := range s.Runs {
		if !knob[r.Tuning] && !slices.Contains(out, r.Tuning) {
			out = append(out, r.Tuning)
		}
	}
	return out
}

func profilesOf(runs []SummaryRun) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.Profile) {
			out = append(out, r.Profile)
		}
	}
	return out
}

// headlineColumns are the metrics of the headline table.
var headlineColumns = []struct{ name, head, format string }{
	{"handshake_ms", "handshake ms", "%.1f"},
	{"ttfd_ms", "TTFD ms", "%.1f"},
	{"latency_ms.p50", "p50 ms", "%.1f"},
	{"latency_ms.p99", "p99 ms", "%.1f"},
	{"latency_app_ms.p50", "p50 from call ms", "%.1f"},
	{"latency_app_ms.p99", "p99 from call ms", "%.1f"},
	{"delivery_ratio", "delivered", "%.3f"},
	{"cpu_ms_per_msg", "CPU ms/msg", "%.2f"},
	{"wire_bytes_per_msg", "wire B/msg", "%.0f"},
	{"peak_rss_kib", "RSS KiB", "%.0f"},
}

func summaryValue(r *SummaryRun, name string) float64 {
	if f, ok := metricByName(name); ok {
		return f.Get(&r.Metrics)
	}
	if name == "wire_bytes_per_msg" {
		if v, ok := r.Diag["pub.wire_bytes_per_msg"]; ok {
			return v
		}
		if s := r.Diag["sent"]; s > 0 {
			return float64(r.Metrics.WireBytes) / s
		}
		return math.NaN()
	}
	if k, ok := strings.CutPrefix(name, "diag."); ok {
		if v, ok := r.Diag[k]; ok {
			return v
		}
	}
	return math.NaN()
}

// headlineRuns are the runs of the headline table: base tunings at the
// headline payload.
func headlineRuns(s *Summary) []SummaryRun {
	pl := headlinePayload(s.Runs)
	base := baseTunings(s)
	var out []SummaryRun
	for _, r := range s.Runs {
		if r.Payload == pl && slices.Contains(base, r.Tuning) {
			out = append(out, r)
		}
	}
	return out
}

// WriteHeadline prints the headline table (medians over repeats) for a
// terminal.
func WriteHeadline(w io.Writer, s *Summary) error {
	runs := headlineRuns(s)
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no successful runs")
		return err
	}
	fmt.Fprintf(w, "Headline: payload %d B, medians over repeats (publisher: handshake, TTFD, CPU, wire, RSS; subscriber: latency, delivery; "+
		"p50/p99 start at the message's send-time stamp, taken once the connection is up; \"from call\" starts at the application's publish call, the same event for both protocols)\n", headlinePayload(s.Runs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "profile\ttuning\tprotocol\t")
	for _, c := range headlineColumns {
		fmt.Fprintf(tw, "%s\t", c.head)
	}
	fmt.Fprintln(tw)
	for i := range runs {
		r := &runs[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t", r.Profile, r.Tuning, r.Config().Label())
		for _, c := range headlineColumns {
			fmt.Fprintf(tw, c.format+"\t", summaryValue(r, c.name))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Partial {
		_, err := fmt.Fprintf(w, "PARTIAL results: %s\n", s.PartialReason)
		return err
	}
	return nil
}

// fmtEst formats a median with the 95 % CI of the mean when known.
func fmtEst(e Estimate, format string) string {
	if e.N == 0 || math.IsNaN(e.Median) {
		return "–"
	}
	v := fmt.Sprintf(format, e.Median)
	if !math.IsNaN(e.Lo) {
		v += fmt.Sprintf(" ±"+format, e.HalfWidth())
	}
	return v
}

// fmtDiff formats a difference with its CI as "+12.3 [8.1, 16.5]".
func fmtDiff(e Estimate, format string) string {
	if math.IsNaN(e.Mean) {
		return "–"
	}
	v := fmt.Sprintf("%+"+strings.TrimPrefix(format, "%"), e.Mean)
	if !math.IsNaN(e.Lo) {
		v += fmt.Sprintf(" ["+format+", "+format+"]", e.Lo, e.Hi)
	}
	return v
}

// md is a small markdown writer.
type md struct{ bytes.Buffer }

func (m *md) p(format string, args ...any) { fmt.Fprintf(&m.Buffer, format+"\n\n", args...) }
func (m *md) line(format string, args ...any) {
	fmt.Fprintf(&m.Buffer, format+"\n", args...)
}
func (m *md) table(head []string, rows [][]string) {
	m.line("| %s |", strings.Join(head, " | "))
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
	}
	m.line("|%s|", strings.Join(sep, "|"))
	for _, r := range rows {
		m.line("| %s |", strings.Join(r, " | "))
	}
	m.line("")
}

// WriteReport writes Dir/report.md and its PNG plots.
func WriteReport(in ReportInput) error {
	s := in.Summary
	ix := newIndex(in.Samples)
	var m md
	title := in.Title
	if title == "" {
		title = "quiot bench: HTTP/3 pub-sub vs MQTT over QUIC"
	}
	m.p("# %s", title)
	if s.Partial {
		m.p("> **PARTIAL RESULTS** — %s. The runs below are valid; the matrix is incomplete.", s.PartialReason)
	}
	m.p("Run %s – %s on %s (%s/%s, %d CPUs, %s), quiot %s, %s.",
		s.Started.UTC().Format("2006-01-02 15:04:05"), s.Finished.UTC().Format("15:04:05 MST"), s.Host.Hostname,
		s.Host.OS, s.Host.Arch, s.Host.CPUs, s.Host.CPUModel, s.Version, s.Host.Go)
	m.p("Workload per run: one publisher sends %d messages (QoS %d, rate %s) to one topic; one subscriber receives them. "+
		"Broker, publisher and subscriber are separate processes of the same binary; each client reaches the broker "+
		"through its own userspace link emulator (internal/netimpair) applying the link profile in both directions. "+
		"Each configuration was repeated up to %d times; tables show the median over repeats and ± the half-width of the "+
		"95 %% confidence interval of the mean (Student's t); runs.csv holds every repeat.",
		s.Workload.Count, s.Workload.QoS, rateText(s.Workload.Rate), s.Workload.Repeat)
	writeLinks(&m, s, in.Links)

	m.p("## Headline")
	var hb bytes.Buffer
	if err := WriteHeadline(&hb, s); err != nil {
		return err
	}
	m.line("```")
	m.Buffer.Write(hb.Bytes())
	m.line("```")
	m.line("")
	m.p("Handshake, TTFD (first publish started, connection setup included -> broker acknowledgement), CPU, wire bytes and RSS " +
		"are the publisher's (the constrained device); latency (publisher send time -> delivery) and delivery ratio are " +
		"measured at the subscriber. Latency \"from call\" (latency_app_ms) starts at the application's publish call instead, before any connection setup, " +
		"the same event for both protocols (issue 12): the subscriber's latency plus the publisher's wait before the stamp, matched in order. " +
		"Wire bytes are UDP payload bytes sent and received at the publisher's own socket.")

	writeClaims(&m, s, ix, in.Links)
	writeClosing(&m, s, ix, in.Links)

	if err := writePlots(&m, s, ix, in.Dir); err != nil {
		return err
	}
	if err := writeKnobs(&m, s, ix, in.Dir); err != nil {
		return err
	}
	writeAllRuns(&m, s, ix)
	writeFailures(&m, in.Samples)

	if err := os.WriteFile(filepath.Join(in.Dir, "report.md"), m.Bytes(), 0o644); err != nil {
		return fmt.Errorf("couldn't write report: %w", err)
	}
	return htmlreport.WriteDir(in.Dir) // report.html beside it (not on 32-bit ARM)
}

func rateText(r float64) string {
	if r <= 0 {
		return "unpaced"
	}
	return fmt.Sprintf("%g msg/s", r)
}

func writeLinks(m *md, s *Summary, links map[string]LinkInfo) {
	if len(links) == 0 {
		return
	}
	var rows [][]string
	for _, p := range profilesOf(s.Runs) {
		l, ok := links[p]
		if !ok {
			continue
		}
		rate := "unlimited"
		if l.RateKbps > 0 {
			rate = fmt.Sprintf("%g kbit/s", l.RateKbps)
			if l.RateDownKbps > 0 && l.RateDownKbps != l.RateKbps {
				rate = fmt.Sprintf("%g up / %g down kbit/s", l.RateKbps, l.RateDownKbps)
			}
		}
		rows = append(rows, []string{p, fmt.Sprintf("%.3g", l.DelayMs), fmt.Sprintf("%.3g", l.JitterMs), fmt.Sprintf("%.3g", l.LossPct), rate, fmt.Sprintf("%.3g", l.RTTMs()), l.Desc})
	}
	if len(rows) > 0 {
		m.p("Link profiles (per direction, on each client's link):")
		m.table([]string{"profile", "one-way delay ms", "jitter ms", "loss % (mean)", "rate", "added RTT ms", "what it models"}, rows)
	}
}

// pairs yields, per profile and base tuning, the MQTT configuration and the
// HTTP/3 configurations of the headline payload.
type pair struct {
	profile, tuning string
	mqtt            Config
	h3              []Config
}

func comparisonPairs(s *Summary) []pair {
	pl := headlinePayload(s.Runs)
	var out []pair
	for _, prof := range profilesOf(s.Runs) {
		for _, tun := range baseTunings(s) {
			p := pair{profile: prof, tuning: tun}
			found := false
			for _, r := range s.Runs {
				if r.Profile != prof || r.Tuning != tun || r.Payload != pl {
					continue
				}
				if r.Proto == ProtoMQTT {
					p.mqtt, found = r.Config(), true
				} else {
					p.h3 = append(p.h3, r.Config())
				}
			}
			if found && len(p.h3) > 0 {
				out = append(out, p)
			}
		}
	}
	return out
}

// relText says how much larger (positive) or smaller a is than b, in %.
func relText(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	return fmt.Sprintf("%+.0f %%", 100*(a-b)/b)
}

func writeClaims(m *md, s *Summary, ix index, links map[string]LinkInfo) {
	pairs := comparisonPairs(s)
	m.p("## The study's claims, with our numbers")
	if len(pairs) == 0 {
		m.p("Not enough data: the claims need HTTP/3 and MQTT runs of the same profile, tuning and payload.")
		return
	}
	m.p("Saif & Matrawy (IEEE IoT-J 2024, arXiv 2208.11178) found that (a) HTTP/3 pub-sub reaches first data about one RTT "+
		"sooner than MQTT over QUIC (no CONNECT/CONNACK before the first PUBLISH), (b) has lower publish -> deliver latency, "+
		"(c) at slightly higher resource use. Differences below are HTTP/3 minus MQTT (negative: HTTP/3 lower), mean with "+
		"its 95 %% Welch confidence interval, payload %d B. \"no difference\" means the interval includes zero.", headlinePayload(s.Runs))

	var rowsA, rowsB, rowsC [][]string
	type tally struct{ yes, no, na int }
	var ta, tb, tc tally
	for _, p := range pairs {
		rtt := math.NaN()
		if l, ok := links[p.profile]; ok {
			rtt = l.RTTMs()
		}
		for _, h := range p.h3 {
			lbl := []string{p.profile, p.tuning, h.Label()}
			d := DiffCI95(ix.values(h, "ttfd_ms"), ix.values(p.mqtt, "ttfd_ms"))
			verdict := "–"
			ratio := "–"
			switch {
			case math.IsNaN(d.Mean):
			case math.IsNaN(rtt) || rtt < 5:
				verdict = "n/a (no link RTT)"
				ta.na++
			default:
				r := -d.Median / rtt // medians, like the table's TTFD columns
				ratio = fmt.Sprintf("%.2f", r)
				if r >= 0.5 && r <= 1.5 {
					verdict = "**yes**"
					ta.yes++
				} else {
					verdict = "no"
					ta.no++
				}
			}
			inCI := "–"
			if !math.IsNaN(d.Lo) && !math.IsNaN(rtt) && rtt >= 5 {
				inCI = "no"
				if -d.Hi <= rtt && rtt <= -d.Lo {
					inCI = "yes"
				}
			}
			rowsA = append(rowsA, append(lbl, fmtEst(ix.est(h, "ttfd_ms"), "%.1f"), fmtEst(ix.est(p.mqtt, "ttfd_ms"), "%.1f"), fmtDiff(d, "%.1f"), fmtFloatOr(rtt, "%.0f"), ratio, inCI, verdict))

			dl := DiffCI95(ix.values(h, "latency_ms.p50"), ix.values(p.mqtt, "latency_ms.p50"))
			vb := signVerdict(dl, "**yes** (lower)", "no (higher)", &tb.yes, &tb.no, &tb.na)
			steady := DiffCI95(ix.values(h, "diag.sub.steady_latency_ms.p50"), ix.values(p.mqtt, "diag.sub.steady_latency_ms.p50"))
			rowsB = append(rowsB, append(slices.Clone(lbl), fmtEst(ix.est(h, "latency_ms.p50"), "%.1f"), fmtEst(ix.est(p.mqtt, "latency_ms.p50"), "%.1f"), fmtDiff(dl, "%.1f"),
				fmtEst(ix.est(h, "latency_ms.p99"), "%.1f"), fmtEst(ix.est(p.mqtt, "latency_ms.p99"), "%.1f"), fmtDiff(steady, "%.1f"), vb))

			dc := DiffCI95(ix.values(h, "cpu_ms_per_msg"), ix.values(p.mqtt, "cpu_ms_per_msg"))
			dw := DiffCI95(ix.values(h, "wire_bytes_per_msg"), ix.values(p.mqtt, "wire_bytes_per_msg"))
			dr := DiffCI95(ix.values(h, "peak_rss_kib"), ix.values(p.mqtt, "peak_rss_kib"))
			more := 0
			for _, e := range []Estimate{dc, dw, dr} {
				if e.Sign() > 0 {
					more++
				}
			}
			vc := fmt.Sprintf("%d of 3 higher", more)
			switch more {
			case 0:
				tc.no++
			default:
				tc.yes++
			}
			rowsC = append(rowsC, append(slices.Clone(lbl),
				fmtDiff(dc, "%.3f")+" ("+relText(dc.Mean+mean(ix.values(p.mqtt, "cpu_ms_per_msg")), mean(ix.values(p.mqtt, "cpu_ms_per_msg")))+")",
				fmtDiff(dw, "%.0f")+" ("+relText(dw.Mean+mean(ix.values(p.mqtt, "wire_bytes_per_msg")), mean(ix.values(p.mqtt, "wire_bytes_per_msg")))+")",
				fmtDiff(dr, "%.0f")+" ("+relText(dr.Mean+mean(ix.values(p.mqtt, "peak_rss_kib")), mean(ix.values(p.mqtt, "peak_rss_kib")))+")",
				vc))
		}
	}
	m.p("### (a) Time to first data: HTTP/3 about one RTT lower?")
	m.p("Verdict: %d yes, %d no, %d not applicable (links without delay, where one RTT is below the noise). "+
		"\"RTTs saved\" = (MQTT − HTTP/3 median TTFD) / the link's added RTT; yes when within 0.5–1.5.", ta.yes, ta.no, ta.na)
	m.table([]string{"profile", "tuning", "HTTP/3 mode", "HTTP/3 TTFD ms", "MQTT TTFD ms", "HTTP/3 − MQTT ms [95 % CI]", "link RTT ms", "RTTs saved", "CI holds −1 RTT", "agrees"}, rowsA)
	m.p("### (b) Publish -> deliver latency: HTTP/3 lower?")
	m.p("Verdict: %d yes, %d no, %d no significant difference (median latency per run; CI over repeats). The publisher sends its "+
		"first window of %d messages as soon as the connection is up; on slow links they queue behind the handshake's tail "+
		"(for MQTT the CONNECT/CONNACK round trip comes before the first send time is taken), so the column \"after the first "+
		"window\" compares the steady state.", tb.yes, tb.no, tb.na, max(1, s.Workload.Inflight))
	m.table([]string{"profile", "tuning", "HTTP/3 mode", "HTTP/3 p50 ms", "MQTT p50 ms", "p50 HTTP/3 − MQTT [95 % CI]", "HTTP/3 p99 ms", "MQTT p99 ms", "p50 after the first window, HTTP/3 − MQTT", "HTTP/3 lower"}, rowsB)
	m.p("### (c) Resources: HTTP/3 slightly higher?")
	m.p("Publisher CPU per message, wire bytes per message and peak RSS, HTTP/3 minus MQTT. In %d configurations HTTP/3 is "+
		"significantly higher on at least one of the three; in %d on none.", tc.yes, tc.no)
	m.table([]string{"profile", "tuning", "HTTP/3 mode", "CPU ms/msg", "wire B/msg", "peak RSS KiB", "HTTP/3 higher"}, rowsC)

	writeLeanTarget(m, s, ix, pairs)
}

func mean(xs []float64) float64 { return CI95(xs).Mean }

func fmtFloatOr(v float64, format string) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// signVerdict classifies an HTTP/3 − MQTT difference: below zero is
// "lower" (yes), above is no, else no difference.
func signVerdict(d Estimate, lower, higher string, yes, no, none *int) string {
	switch d.Sign() {
	case -1:
		*yes++
		return lower
	case 1:
		*no++
		return higher
	}
	*none++
	if math.IsNaN(d.Mean) {
		return "–"
	}
	if math.IsNaN(d.Lo) {
		return "unknown (one repeat)"
	}
	return "no difference"
}

// costKeys are the publisher diagnostics shown per message in the cost
// breakdown: frame, stream and packet counters.
func costKeys(ix index, cfgs []Config) []string {
	set := map[string]bool{}
	for _, c := range cfgs {
		for _, s := range ix[c] {
			for k, v := range s.Diag {
				if !strings.HasPrefix(k, "pub.") || v == 0 {
					continue
				}
				lk := strings.ToLower(k)
				if strings.Contains(lk, "per_msg") || strings.Contains(lk, "latency") {
					continue
				}
				// diag.trace repeats the frame and loss counters of diag;
				// keep only what it adds (HTTP/3 frames, header bytes, packets).
				if t, ok := strings.CutPrefix(lk, "pub.diag.trace."); ok && !strings.HasPrefix(t, "h3_") && !strings.HasPrefix(t, "packet") {
					continue
				}
				if strings.HasPrefix(lk, "pub.diag.trace.packets_lost") || strings.HasPrefix(lk, "pub.diag.trace.packets_dropped") {
					continue
				}
				for _, w := range []string{"frame", "stream", "packet", "header", "qpack", "pto", "retrans", "lost"} {
					if strings.Contains(lk, w) {
						set[k] = true
						break
					}
				}
			}
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func writeLeanTarget(m *md, s *Summary, ix index, pairs []pair) {
	m.p("### Past the study: with the lean profile, is HTTP/3 no worse on CPU/msg and wire bytes/msg?")
	var rows [][]string
	var worse []pair
	met, missed, unknown := 0, 0, 0
	for _, p := range pairs {
		if p.tuning != "lean" {
			continue
		}
		bad := false
		for _, h := range p.h3 {
			dc := DiffCI95(ix.values(h, "cpu_ms_per_msg"), ix.values(p.mqtt, "cpu_ms_per_msg"))
			dw := DiffCI95(ix.values(h, "wire_bytes_per_msg"), ix.values(p.mqtt, "wire_bytes_per_msg"))
			// "no worse" needs the interval's upper end within 10 % of
			// MQTT's mean; an interval that includes zero but reaches
			// further is inconclusive, not a pass.
			v := func(e Estimate, base float64) string {
				switch {
				case e.Sign() > 0:
					bad = true
					missed++
					return "worse"
				case e.Sign() < 0:
					met++
					return "better"
				case math.IsNaN(e.Hi):
					unknown++
					return "unknown (one repeat)"
				case e.Hi <= 0.1*math.Abs(base):
					met++
					return "no worse"
				}
				unknown++
				return "inconclusive (CI too wide)"
			}
			rows = append(rows, []string{p.profile, h.Label(),
				fmtDiff(dc, "%.3f"), v(dc, mean(ix.values(p.mqtt, "cpu_ms_per_msg"))),
				fmtDiff(dw, "%.0f"), v(dw, mean(ix.values(p.mqtt, "wire_bytes_per_msg")))})
		}
		if bad {
			worse = append(worse, p)
		}
	}
	if len(rows) == 0 {
		m.p("No lean runs of both protocols in this bench.")
		return
	}
	m.p("Target met in %d of %d comparisons, missed in %d, inconclusive in %d (\"no worse\": the 95 %% CI of HTTP/3 − MQTT lies below "+
		"+10 %% of MQTT's mean; \"better\": entirely below zero; \"worse\": entirely above zero).", met, met+missed+unknown, missed, unknown)
	m.table([]string{"profile", "HTTP/3 mode (lean)", "CPU ms/msg HTTP/3 − MQTT", "CPU", "wire B/msg HTTP/3 − MQTT", "wire"}, rows)
	show := worse
	m.p("#### Where the cost goes")
	if len(worse) == 0 {
		for _, p := range pairs {
			if p.tuning == "lean" {
				show = append(show, p)
			}
		}
		m.p("Lean HTTP/3 was not worse anywhere; for reference, the publisher's counters per message (medians over repeats; " +
			"from quic-go's tracer and the counting socket). Per-message figures include the connection setup spread over the run's messages.")
	} else {
		m.p("Publisher counters per message (medians over repeats; from quic-go's tracer and the counting socket) where lean " +
			"HTTP/3 came out worse. Per-message figures include the connection setup spread over the run's messages.")
	}
	for _, p := range show {
		cfgs := append(slices.Clone(p.h3), p.mqtt)
		keys := costKeys(ix, cfgs)
		head := []string{"per message (" + p.profile + ")"}
		for _, c := range cfgs {
			head = append(head, c.Label())
		}
		rows := [][]string{}
		add := func(name string, get func(c Config) float64, format string) {
			r := []string{name}
			for _, c := range cfgs {
				r = append(r, fmtFloatOr(get(c), format))
			}
			rows = append(rows, r)
		}
		perMsg := func(name string) func(c Config) float64 {
			return func(c Config) float64 {
				var xs []float64
				for _, s := range ix[c] {
					if v, ok := sampleValue(&s, name); ok && s.Sent > 0 {
						xs = append(xs, v/float64(s.Sent))
					}
				}
				return Median(xs)
			}
		}
		add("wire bytes", func(c Config) float64 { return Median(ix.values(c, "wire_bytes_per_msg")) }, "%.1f")
		add("wire bytes − payload", func(c Config) float64 {
			return Median(ix.values(c, "wire_bytes_per_msg")) - float64(c.Payload)
		}, "%.1f")
		add("datagrams", func(c Config) float64 { return Median(ix.values(c, "wire_datagrams_per_msg")) }, "%.2f")
		add("CPU ms", func(c Config) float64 { return Median(ix.values(c, "cpu_ms_per_msg")) }, "%.3f")
		for _, k := range keys {
			add(strings.TrimPrefix(k, "pub."), perMsg("diag."+k), "%.2f")
		}
		m.table(head, rows)
	}
	m.p("Reading the table: in request mode every message is a new bidirectional QUIC stream carrying a HEADERS frame " +
		"(QPACK-encoded :method, :path with the topic, content headers) and a DATA frame, and the broker answers with its own " +
		"HEADERS; stream credit comes back in MAX_STREAMS frames. MQTT sends a PUBLISH of a few bytes of fixed header plus " +
		"the topic on one long-lived stream, and a 4-byte PUBACK. The stream publish mode removes the per-message stream, " +
		"HEADERS and MAX_STREAMS costs; what remains is framing plus ACK traffic, which is the same for both protocols on " +
		"one QUIC connection.")
}

func writePlots(m *md, s *Summary, ix index, dir string) error {
	runs := headlineRuns(s)
	if len(runs) == 0 {
		return nil
	}
	m.p("## Plots")
	if !plotsBuiltIn {
		m.p("%s", noPlotsNote)
		return nil
	}
	m.p("Dots are medians over repeats, whiskers the 95 %% confidence interval of the mean.")
	profiles := profilesOf(runs)
	var series []string
	var seriesCfg []func(prof string) (Config, bool)
	for _, r := range runs {
		key := r.Tuning + " " + r.Config().Label()
		if slices.Contains(series, key) {
			continue
		}
		series = append(series, key)
		proto, mode, tun, pl := r.Proto, r.Mode, r.Tuning, r.Payload
		seriesCfg = append(seriesCfg, func(prof string) (Config, bool) {
			c := Config{Proto: proto, Mode: mode, Tuning: tun, Payload: pl, Profile: prof}
			return c, len(ix[c]) > 0
		})
	}
	charts := []struct{ file, title, ylabel, metric string }{
		{"ttfd", "Time to first data per protocol", "TTFD ms", "ttfd_ms"},
		{"handshake", "QUIC handshake", "handshake ms", "handshake_ms"},
		{"latency_p50", "Publish -> deliver latency (median)", "p50 latency ms", "latency_ms.p50"},
		{"cpu_per_msg", "Publisher CPU per message", "CPU ms/msg", "cpu_ms_per_msg"},
		{"wire_per_msg", "Publisher wire bytes per message", "UDP bytes/msg", "wire_bytes_per_msg"},
		{"rss", "Publisher peak RSS", "KiB", "peak_rss_kib"},
	}
	for _, c := range charts {
		err := dotChart(plotName(dir, c.file), c.title+fmt.Sprintf(" (payload %d B)", headlinePayload(s.Runs)), c.ylabel, profiles, series, func(g, si int) (Estimate, bool) {
			cfg, ok := seriesCfg[si](profiles[g])
			if !ok {
				return Estimate{}, false
			}
			return ix.est(cfg, c.metric), true
		})
		if err != nil {
			return err
		}
		m.p("![%s](%s.png)", c.title, c.file)
	}
	for _, prof := range profiles {
		var lines []cdfLine
		for si, name := range series {
			cfg, ok := seriesCfg[si](prof)
			if !ok {
				continue
			}
			var vals []float64
			for _, smp := range ix[cfg] {
				vals = append(vals, smp.Latencies...)
			}
			approx := false
			if len(vals) == 0 {
				approx = true
				for _, smp := range ix[cfg] {
					l := smp.Metrics.LatencyMs
					// Percentile points: 50 below p50, 45 up to p95, 4 to p99, 1 to max.
					for i := 0; i < 50; i++ {
						vals = append(vals, l.P50)
					}
					for i := 0; i < 45; i++ {
						vals = append(vals, l.P95)
					}
					for i := 0; i < 4; i++ {
						vals = append(vals, l.P99)
					}
					vals = append(vals, l.Max)
				}
			}
			lines = append(lines, cdfLine{Name: name, Values: vals, Approx: approx})
		}
		file := "latency_cdf_" + prof
		if err := cdfChart(plotName(dir, file), "Latency CDF, "+prof+" link", "publish -> deliver latency ms", lines); err != nil {
			return err
		}
		m.p("![latency CDF %s](%s.png)", prof, file)
	}
	return nil
}

// knobTunings lists the single-knob variants in the summary's order.
func knobTunings(s *Summary) []Tuning {
	var out []Tuning
	for _, t := range s.Tunings {
		if t.Knob != "" {
			out = append(out, t)
		}
	}
	return out
}

// knobMetrics are the metrics of the tuning-knob tables.
var knobMetrics = []struct{ name, head, format string }{
	{"handshake_ms", "handshake ms", "%.1f"},
	{"ttfd_ms", "TTFD ms", "%.1f"},
	{"latency_ms.p50", "p50 ms", "%.1f"},
	{"latency_ms.p99", "p99 ms", "%.1f"},
	{"delivery_ratio", "delivered", "%.3f"},
	{"cpu_ms_per_msg", "CPU ms/msg", "%.3f"},
	{"wire_bytes_per_msg", "wire B/msg", "%.1f"},
	{"peak_rss_kib", "RSS KiB", "%.0f"},
}

func writeKnobs(m *md, s *Summary, ix index, dir string) error {
	knobs := knobTunings(s)
	if len(knobs) == 0 {
		return nil
	}
	m.p("## Effect of each tuning knob (one at a time from lean)")
	if err := knobPlots(m, s, ix, dir, knobs); err != nil {
		return err
	}
	m.p("Each cell: median [95 %% CI] and, in brackets, the change of the mean against lean with a mark when the confidence " +
		"intervals do not overlap (↑ higher, ↓ lower).")
	for _, c := range knobGroups(s) {
		head := []string{"tuning"}
		for _, km := range knobMetrics {
			head = append(head, km.head)
		}
		var rows [][]string
		base := c
		base.Tuning = "lean"
		for _, t := range append([]Tuning{{Name: "lean"}}, knobs...) {
			cfg := c
			cfg.Tuning = t.Name
			if len(ix[cfg]) == 0 {
				continue
			}
			r := []string{t.Name}
			for _, km := range knobMetrics {
				e := ix.est(cfg, km.name)
				cell := fmtEst(e, km.format)
				if t.Name != "lean" {
					b := ix.est(base, km.name)
					if b.N > 0 && b.Mean != 0 {
						cell += " (" + relText(e.Mean, b.Mean) + ")"
						if !Overlap(e, b) {
							if e.Mean > b.Mean {
								cell += " ↑"
							} else {
								cell += " ↓"
							}
						}
					}
				}
				r = append(r, cell)
			}
			rows = append(rows, r)
		}
		m.p("**%s, %s, payload %d B**", c.Profile, c.Label(), c.Payload)
		m.table(head, rows)
	}
	return nil
}

// knobGroups are the (profile, protocol, mode, payload) combinations that
// have lean runs, with Tuning left empty.
func knobGroups(s *Summary) []Config {
	var out []Config
	for _, r := range s.Runs {
		if r.Tuning != "lean" {
			continue
		}
		c := r.Config()
		c.Tuning = ""
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func writeAllRuns(m *md, s *Summary, ix index) {
	m.p("## All configurations")
	head := []string{"profile", "tuning", "protocol", "payload", "n"}
	for _, km := range knobMetrics {
		head = append(head, km.head)
	}
	var rows [][]string
	for i := range s.Runs {
		r := &s.Runs[i]
		c := r.Config()
		row := []string{r.Profile, r.Tuning, c.Label(), fmt.Sprint(r.Payload), fmt.Sprint(r.Repeat)}
		for _, km := range knobMetrics {
			row = append(row, fmtEst(ix.est(c, km.name), km.format))
		}
		rows = append(rows, row)
	}
	m.table(head, rows)
}

func writeFailures(m *md, samples []Sample) {
	var rows [][]string
	for _, s := range samples {
		if !s.OK {
			rows = append(rows, []string{s.Profile, s.Tuning, s.Label(), fmt.Sprint(s.Payload), fmt.Sprint(s.Repeat), strings.ReplaceAll(s.Err, "|", "/")})
		}
	}
	if len(rows) == 0 {
		return
	}
	m.p("## Failed runs")
	m.p("These repeats are left out of every figure above; their role logs are under runs/.")
	m.table([]string{"profile", "tuning", "protocol", "payload", "repeat", "error"}, rows)
}

// perMsgMedian is the median over c's repeats of a diagnostic divided by
// the messages sent; NaN when absent.
func (ix index) perMsgMedian(c Config, key string) float64 {
	var xs []float64
	for _, s := range ix[c] {
		if v, ok := s.Diag[key]; ok && s.Sent > 0 {
			xs = append(xs, v/float64(s.Sent))
		}
	}
	return Median(xs)
}

// writeClosing is the closing note: what the numbers say about where
// HTTP/3's cost goes and what would remove it.
func writeClosing(m *md, s *Summary, ix index, links map[string]LinkInfo) {
	var lean []pair
	for _, p := range comparisonPairs(s) {
		if p.tuning == "lean" {
			lean = append(lean, p)
		}
	}
	if len(lean) == 0 {
		lean = comparisonPairs(s)
	}
	if len(lean) == 0 {
		return
	}
	// The slowest link tells the most.
	p := lean[0]
	for _, q := range lean {
		if links[q.profile].RTTMs() > links[p.profile].RTTMs() {
			p = q
		}
	}
	var req, str *Config
	for i := range p.h3 {
		switch p.h3[i].Mode {
		case ModeRequest:
			req = &p.h3[i]
		case ModeStream:
			str = &p.h3[i]
		}
	}
	m.p("## Closing note")
	var bullets []string
	if req != nil {
		hs := ix.perMsgMedian(*req, "pub.diag.trace.h3_header_bytes_sent")
		hr := ix.perMsgMedian(*req, "pub.diag.trace.h3_header_bytes_received")
		ms := ix.perMsgMedian(*req, "pub.diag.frames_received.MAX_STREAMS")
		if !math.IsNaN(hs) {
			b := fmt.Sprintf("HTTP/3 request mode pays per message %.0f bytes of HEADERS sent and %.0f received (QPACK with "+
				"its static table only: quic-go's QPACK has no dynamic table, so :path with the topic and the content headers "+
				"go out in full every time)", hs, hr)
			if !math.IsNaN(ms) {
				b += fmt.Sprintf(", and receives %.2f MAX_STREAMS frames per message: quic-go returns stream credit as streams "+
					"close, whatever MaxIncomingStreams is, so the high-watermark idea of the study does not hold here", ms)
			}
			bullets = append(bullets, b+".")
		}
		if str != nil {
			d := DiffCI95(ix.values(*req, "wire_bytes_per_msg"), ix.values(*str, "wire_bytes_per_msg"))
			if !math.IsNaN(d.Mean) {
				bullets = append(bullets, fmt.Sprintf("The stream publish mode (one long-lived request carrying frames) removes "+
					"the per-message stream, HEADERS and MAX_STREAMS: on %s it changes wire bytes per message by %s against "+
					"request mode. For a device that publishes often, stream mode is the fix, and it keeps HTTP/3's shorter TTFD "+
					"(no CONNECT/CONNACK); request mode suits occasional messages and plain HTTP tools.", p.profile, fmtDiff(DiffCI95(ix.values(*str, "wire_bytes_per_msg"), ix.values(*req, "wire_bytes_per_msg")), "%.0f")))
			}
		}
	}
	pto := ix.perMsgMedian(p.mqtt, "pub.diag.pto_count")
	if !math.IsNaN(pto) && pto > 0 {
		var runs []float64
		for _, smp := range ix[p.mqtt] {
			runs = append(runs, smp.Diag["pub.diag.pto_count"])
		}
		bullets = append(bullets, fmt.Sprintf("On %s every protocol's handshake suffers: %.0f PTO expiries per publisher connection "+
			"(median), as quic-go starts from a 100 ms RTT estimate and a full-size Initial takes hundreds of ms to serialize "+
			"at tens of kbit/s. quic.Config has no knob for the initial RTT; a smaller certificate chain (ECDSA P-256, no "+
			"intermediates) and session resumption shorten what must cross the link.", p.profile, Median(runs)))
	}
	bullets = append(bullets, fmt.Sprintf("Per-message figures of short runs (%d messages) include the connection setup. "+
		"Run `quiot bench --count 100` (the full bench's default) to see the steady state; CPU is process CPU from wait4, "+
		"start-up included.", s.Workload.Count))
	for _, b := range bullets {
		m.line("- %s", b)
	}
	m.line("")
}

// knobPlots draws, per metric, each variant's change against lean in
// percent with its confidence interval, one series per link profile and
// protocol.
func knobPlots(m *md, s *Summary, ix index, dir string, knobs []Tuning) error {
	if !plotsBuiltIn {
		m.p("%s", noPlotsNote)
		return nil
	}
	groups := knobGroups(s)
	var series []string
	for _, g := range groups {
		series = append(series, fmt.Sprintf("%s %s %dB", g.Profile, g.Label(), g.Payload))
	}
	var names []string
	for _, t := range knobs {
		names = append(names, strings.TrimPrefix(t.Name, "lean/"))
	}
	metrics := []struct{ file, title, metric string }{
		{"knob_ttfd", "TTFD", "ttfd_ms"},
		{"knob_latency_p50", "median latency", "latency_ms.p50"},
		{"knob_cpu_per_msg", "publisher CPU per message", "cpu_ms_per_msg"},
		{"knob_wire_per_msg", "publisher wire bytes per message", "wire_bytes_per_msg"},
	}
	for _, km := range metrics {
		err := dotChartScale(plotName(dir, km.file), "Effect of each knob on "+km.title+" (change against lean)", "% change", names, series,
			func(gi, si int) (Estimate, bool) {
				c := groups[si]
				c.Tuning = knobs[gi].Name
				base := groups[si]
				base.Tuning = "lean"
				e, b := ix.est(c, km.metric), ix.est(base, km.metric)
				if e.N == 0 || b.N == 0 || b.Mean == 0 {
					return Estimate{}, false
				}
				rel := func(v float64) float64 { return 100 * (v/b.Mean - 1) }
				return Estimate{N: e.N, Mean: rel(e.Mean), Median: rel(e.Median), Lo: rel(e.Lo), Hi: rel(e.Hi)}, true
			}, false)
		if err != nil {
			return err
		}
		m.p("![knob effect on %s](%s.png)", km.title, km.file)
	}
	return nil
}

// WriteComparison prints, for the slowest link of the headline runs, each
// HTTP/3 mode against MQTT over QUIC in one line: TTFD (and how many link
// RTTs apart), median latency, CPU and wire bytes per message.
func WriteComparison(w io.Writer, s *Summary, samples []Sample, links map[string]LinkInfo) error {
	ix := newIndex(samples)
	pairs := comparisonPairs(s)
	if len(pairs) == 0 {
		return nil
	}
	slowest := pairs[0].profile
	for _, p := range pairs {
		if links[p.profile].RTTMs() > links[slowest].RTTMs() {
			slowest = p.profile
		}
	}
	for _, p := range pairs {
		if p.profile != slowest {
			continue
		}
		rtt := links[p.profile].RTTMs()
		for _, h := range p.h3 {
			d := DiffCI95(ix.values(h, "ttfd_ms"), ix.values(p.mqtt, "ttfd_ms"))
			rtts := ""
			if rtt >= 5 && !math.IsNaN(d.Median) {
				rtts = fmt.Sprintf(" = %.2f RTT", -d.Median/rtt)
			}
			med := func(c Config, name string) float64 { return Median(ix.values(c, name)) }
			if _, err := fmt.Fprintf(w, "%s, %s: %s vs MQTT/QUIC: TTFD %.0f vs %.0f ms (%+.0f ms%s); p50 latency %.0f vs %.0f ms; CPU %.2f vs %.2f ms/msg; wire %.0f vs %.0f B/msg\n",
				p.profile, p.tuning, h.Label(), med(h, "ttfd_ms"), med(p.mqtt, "ttfd_ms"), d.Median, rtts,
				med(h, "latency_ms.p50"), med(p.mqtt, "latency_ms.p50"), med(h, "cpu_ms_per_msg"), med(p.mqtt, "cpu_ms_per_msg"),
				med(h, "wire_bytes_per_msg"), med(p.mqtt, "wire_bytes_per_msg")); err != nil {
				return err
			}
		}
	}
	return nil
}
