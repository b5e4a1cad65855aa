package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/qmetrics"
)

func init() {
	register(command{
		name:    "sub",
		summary: "subscribe to a topic filter and print the messages",
		run:     runSub,
	})
}

// dedupFlagHelp explains --dedup and why it is on by default.
const dedupFlagHelp = "drop QoS 1 redeliveries: a message with the topic, send stamp and payload of one among the last 4096 " +
	"(a publisher or its spool sending again after a lost acknowledgement, a broker redelivering), or, for an unstamped one, " +
	"with the topic, payload and broker sequence number of one since the last gap. " +
	"On by default: QoS 1 is at least once, reconnects and retries repeat messages, and whoever reads the output " +
	"(and --count) wants each message once; only such exact repeats are dropped. " +
	"--dedup=false prints every delivery, e.g. to see the redeliveries"

// subDeduper drops the redeliveries `quiot sub --dedup` leaves out. A
// stamped message is recognised by its stamp, remembered across gaps; an
// unstamped one by its broker sequence number, forgotten at a gap: a broker
// that restarted without its history announces a gap and numbers from 1
// again, and a new message must not be taken for an old one of the same
// number. Not safe for concurrent use (a subscription's handler runs on one
// goroutine).
type subDeduper struct {
	stamped, bySeq client.Deduper
}

// duplicate reports whether m repeats a message seen before.
func (d *subDeduper) duplicate(m *client.Message) bool {
	switch {
	case m.Gap:
		d.bySeq = client.Deduper{}
		return false
	case !m.Sent.IsZero():
		return d.stamped.Duplicate(m)
	default:
		return d.bySeq.Duplicate(m)
	}
}

// subFormats are the output formats of `quiot sub`.
var subFormats = []string{"text", "json", "raw", "none"}

// subPrinter writes delivered messages in one format.
type subPrinter struct {
	w      *bufio.Writer
	format string
	// verbose (-v): raw output is "topic payload", as mosquitto_sub -v.
	verbose bool
	// sep follows each payload of raw and verbose output ("\n" by
	// default, "" with -N).
	sep string
}

// subJSON is one JSON line of `quiot sub --format json`.
type subJSON struct {
	Topic         string   `json:"topic"`
	Seq           uint64   `json:"seq"`
	Payload       *string  `json:"payload,omitempty"`
	PayloadBase64 []byte   `json:"payload_base64,omitempty"`
	Time          int64    `json:"time,omitempty"`
	LatencyMS     *float64 `json:"latency_ms,omitempty"`
	Retained      bool     `json:"retained,omitempty"`
	Replayed      bool     `json:"replayed,omitempty"`
	Gap           bool     `json:"gap,omitempty"`
}

// print writes m and flushes, so a reader of a pipe sees it at once.
// Gaps are not written in raw and verbose output (the caller logs them).
func (p *subPrinter) print(m *client.Message) error {
	switch {
	case p.format == "none":
		return nil
	case p.verbose || p.format == "raw":
		if m.Gap {
			return nil
		}
		if p.verbose {
			_, _ = p.w.WriteString(m.Topic)
			_ = p.w.WriteByte(' ')
		}
		_, _ = p.w.Write(m.Payload)
		_, _ = p.w.WriteString(p.sep)
	case p.format == "json":
		j := subJSON{Topic: m.Topic, Seq: m.Seq, Retained: m.Retained, Replayed: m.Replayed, Gap: m.Gap}
		if !m.Gap {
			if utf8.Valid(m.Payload) {
				s := string(m.Payload)
				j.Payload = &s
			} else {
				j.PayloadBase64 = m.Payload
			}
		}
		if !m.Sent.IsZero() {
			j.Time = m.Sent.UnixNano()
			l := ms(m.Latency())
			j.LatencyMS = &l
		}
		b, err := json.Marshal(&j)
		if err != nil {
			return err
		}
		_, _ = p.w.Write(append(b, '\n'))
	default:
		_, _ = p.w.WriteString(textLine(m))
	}
	return p.w.Flush()
}

// textLine is the text rendering of a message: one line of five columns
// separated by single spaces, the same on every protocol (docs/pubsub.md):
//
//	TOPIC SEQ LATENCY KIND PAYLOAD
//
// TOPIC is quoted (Go syntax) when it contains a space, a control character
// or a double quote, or is "-"; "-" is the unknown topic of a gap. SEQ is the
// broker's sequence number, "-" without one (MQTT, gaps). LATENCY is the
// publisher's send stamp to delivery, as "1.500ms", "-" when unstamped. KIND
// is live, retained, replayed (history asked for with --since) or gap.
// PAYLOAD, the rest of the line, is the payload when it is UTF-8 text without
// control characters but tab, else "<N bytes>"; for a gap it says what was
// lost.
func textLine(m *client.Message) string {
	var b strings.Builder
	if m.Gap {
		b.WriteString(textTopic(m.Topic))
		b.WriteString(" - - gap messages lost")
		if m.Seq > 0 {
			fmt.Fprintf(&b, " before #%d", m.Seq)
		}
		b.WriteByte('\n')
		return b.String()
	}
	b.WriteString(textTopic(m.Topic))
	if m.Seq > 0 {
		fmt.Fprintf(&b, " %d", m.Seq)
	} else {
		b.WriteString(" -")
	}
	if !m.Sent.IsZero() {
		fmt.Fprintf(&b, " %.3fms", ms(m.Latency()))
	} else {
		b.WriteString(" -")
	}
	switch {
	case m.Retained:
		b.WriteString(" retained ")
	case m.Replayed:
		b.WriteString(" replayed ")
	default:
		b.WriteString(" live ")
	}
	if printableText(m.Payload) {
		b.Write(m.Payload)
	} else {
		fmt.Fprintf(&b, "<%d bytes>", len(m.Payload))
	}
	b.WriteByte('\n')
	return b.String()
}

// textTopic is a topic as the first column of a text line.
func textTopic(t string) string {
	switch {
	case t == "":
		return "-"
	case t == "-" || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r == '"' || r == 0x7f }):
		return strconv.Quote(t)
	}
	return t
}

// orUnknown names the unknown topic of a gap.
func orUnknown(s string) string {
	if s == "" {
		return "(topic unknown)"
	}
	return s
}

// printableText reports whether p prints on one line as it is: UTF-8
// without control characters other than tab.
func printableText(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, c := range p {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// subStats summarizes what a subscriber received.
type subStats struct {
	Count       int               // messages delivered (gaps and dropped duplicates excluded)
	Replayed    int               // of Count: replayed from the broker's history (--since)
	Retained    int               // of Count: retained messages
	Gaps        int               // gap announcements
	Dups        int               // QoS 1 redeliveries dropped by --dedup
	Latency     *qmetrics.Latency // of live messages carrying the publisher's send time
	FirstSent   time.Time         // earliest publisher send time of a live message
	First, Last time.Time         // first and last delivery
}

func newSubStats(keepSamples bool) *subStats {
	keep := 0
	if keepSamples {
		keep = -1 // qmetrics.DefaultKeepSamples, for CDF plots
	}
	return &subStats{Latency: qmetrics.NewLatency(keep)}
}

// add counts m. Only live messages count in the latency: a retained or
// replayed message was published before the subscription began, so its
// "latency" is its age.
func (s *subStats) add(m *client.Message) {
	if m.Gap {
		s.Gaps++
		return
	}
	s.Count++
	if s.First.IsZero() {
		s.First = m.Received
	}
	s.Last = m.Received
	switch {
	case m.Retained:
		s.Retained++
		return
	case m.Replayed:
		s.Replayed++
		return
	}
	if m.Sent.IsZero() {
		return
	}
	s.Latency.Record(m.Latency())
	if s.FirstSent.IsZero() || m.Sent.Before(s.FirstSent) {
		s.FirstSent = m.Sent
	}
}

// took is the time from the first send (or, without stamps, the first
// delivery) to the last delivery.
func (s *subStats) took() time.Duration {
	start := s.First
	if !s.FirstSent.IsZero() && s.FirstSent.Before(start) {
		start = s.FirstSent
	}
	return s.Last.Sub(start)
}

// summary is the one-line report of a subscription.
func (s *subStats) summary(filter string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "received %d message(s) on %s", s.Count, filter)
	if s.Count > 1 {
		if d := s.Last.Sub(s.First); d > 0 {
			fmt.Fprintf(&b, " in %s (%.1f msg/s)", d.Round(time.Millisecond), float64(s.Count-1)/d.Seconds())
		}
	}
	if s.Replayed > 0 || s.Retained > 0 {
		fmt.Fprintf(&b, "; %d live, %d replayed, %d retained", s.Count-s.Replayed-s.Retained, s.Replayed, s.Retained)
	}
	if s.Latency.Count() > 0 {
		l := s.Latency.Summary()
		fmt.Fprintf(&b, "; latency p50 %.3f ms, p99 %.3f ms, max %.3f ms", l.P50, l.P99, l.Max)
		if s.Replayed > 0 || s.Retained > 0 {
			b.WriteString(" (live only)")
		}
	}
	if s.Gaps > 0 {
		fmt.Fprintf(&b, "; %d gap(s)", s.Gaps)
	}
	if s.Dups > 0 {
		fmt.Fprintf(&b, "; %d duplicate(s) dropped", s.Dups)
	}
	return b.String()
}

// sinceFlag is --since: unset (no replay, retained messages instead), or
// a sequence number to replay the history after, 0 meaning all of it.
type sinceFlag struct {
	seq uint64
	set bool
}

func (f *sinceFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.FormatUint(f.seq, 10)
}

func (f *sinceFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == client.SinceStart {
		return errors.New("want a sequence number (0: from the first message the history holds)")
	}
	f.seq, f.set = n, true
	return nil
}

// since is Subscribe's since argument.
func (f *sinceFlag) since() uint64 {
	switch {
	case !f.set:
		return 0
	case f.seq == 0:
		return client.SinceStart
	}
	return f.seq
}

// sinceFlagHelp explains --since.
const sinceFlagHelp = "replay the broker's history after sequence number SEQ first, instead of the retained messages " +
	"(0 = from the first message the history holds; replayed messages are marked and kept out of the latency). " +
	"HTTP/3 only: over MQTT, which has no history, it is refused"

// sepFlagHelp explains --separator.
const sepFlagHelp = "what follows each payload of --format raw and -v output, with Go escapes (\\n, \\t, \\x00); " +
	"\"\" or -N for none (payloads run together, as before)"

// parseSeparator reads --separator: a Go string literal's contents. A raw
// newline stands for itself (a config file's separator = "\n" arrives as
// one, TOML having decoded the escape).
func parseSeparator(s string) (string, error) {
	u, err := strconv.Unquote(`"` + strings.NewReplacer(`"`, `\"`, "\n", `\n`).Replace(s) + `"`)
	if err != nil {
		return "", fmt.Errorf("%w: bad --separator %q (Go escapes such as \\n, \\t, \\x00)", errUsage, s)
	}
	return u, nil
}

func runSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sub", stderr)
	var cf clientFlags
	cf.register(fs)
	filter := fs.String("topic", "", "topic filter to subscribe to; MQTT wildcards + and # (required)")
	count := fs.Int("count", 0, "exit after N messages (0 = until interrupted)")
	var since sinceFlag
	fs.Var(&since, "since", sinceFlagHelp)
	format := fs.String("format", "text", "output: text (one line a message: topic seq latency kind payload), json (one object a line), "+
		"raw (payloads, each followed by --separator) or none")
	verbose := fs.Bool("v", false, "print each message as \"topic payload\" followed by --separator, as mosquitto_sub -v (with --format text or raw)")
	sep := fs.String("separator", `\n`, sepFlagHelp)
	noSep := fs.Bool("N", false, "no separator after payloads (--separator \"\"), as mosquitto_sub -N")
	quiet := fs.Bool("quiet", false, "print no summary line on stderr")
	gpioOut := fs.String("gpio-out", "", gpioOutFlagHelp)
	dedup := fs.Bool("dedup", true, dedupFlagHelp)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *filter == "" {
		return fmt.Errorf("%w: --topic is required", errUsage)
	}
	if *count < 0 {
		return fmt.Errorf("%w: --count must not be negative", errUsage)
	}
	if !validFormat(*format) {
		return fmt.Errorf("%w: --format %q (want %s)", errUsage, *format, strings.Join(subFormats, ", "))
	}
	separator, err := subSeparator(fs, *format, *verbose, *noSep, *sep)
	if err != nil {
		return err
	}
	opts, log, err := cf.options(stderr)
	if err != nil {
		return err
	}
	meter, err := newRoleMeter(cf.metricsOut, "sub", &opts)
	if err != nil {
		return err
	}
	defer meter.close()
	c, err := client.New(opts)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer c.Close()
	out, err := openGPIOOut(*gpioOut)
	if err != nil {
		return err
	}
	defer closeGPIOOut(out, log)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	notifier := &serviceNotifier{log: log}
	var release sync.Once
	ctx = client.WithSubscribed(ctx, func() {
		log.Info("subscribed", "filter", *filter, "broker", opts.Broker)
		notifier.ready(ctx, "subscribed to "+*filter)
		release.Do(func() { releaseStartPages(log) })
	})
	p := &subPrinter{w: bufio.NewWriter(stdout), format: *format, verbose: *verbose, sep: separator}
	st := newSubStats(meter != nil)
	var dd *subDeduper
	if *dedup {
		dd = &subDeduper{}
	}
	var outErr error
	err = c.Subscribe(ctx, *filter, since.since(), func(m client.Message) {
		if outErr != nil || (*count > 0 && st.Count >= *count) {
			return // a message delivered after the cancel of --count is not printed
		}
		if dd != nil && dd.duplicate(&m) {
			st.Dups++
			log.Debug("duplicate dropped", "topic", m.Topic, "seq", m.Seq)
			return
		}
		st.add(&m)
		if m.Gap && (p.verbose || p.format == "raw") {
			log.Warn("gap: messages lost", "topic", m.Topic, "before", m.Seq) // not in the payload stream
		}
		driveGPIOOut(out, &m, log)
		if err := p.print(&m); err != nil {
			outErr = fmt.Errorf("couldn't write output: %w", err)
			cancel()
			return
		}
		if *count > 0 && st.Count >= *count {
			cancel()
		}
	})
	if !*quiet {
		fmt.Fprintln(stderr, st.summary(*filter))
	}
	if outErr != nil {
		err = outErr
	}
	merr := meter.finish(uint64(st.Count), func(m *qmetrics.RoleMetrics) {
		m.MessagesReceived = uint64(st.Count)
		m.HandshakeMs = qmetrics.Ms(c.Stats().Handshake)
		m.SetLatency(st.Latency, true)
		m.Diag.Replayed, m.Diag.Retained = uint64(st.Replayed), uint64(st.Retained)
		expected := uint64(*count)
		if expected == 0 {
			expected = uint64(st.Count)
		}
		m.SetDelivery(expected, uint64(st.Count), st.took())
	})
	return errors.Join(explainConnErr(err), merr)
}

// subSeparator checks sub's output flags together (-v goes with --format
// text or raw; --separator and -N with raw or -v, not both) and returns
// what follows each payload: sep read as a Go string literal's contents,
// or nothing with -N.
func subSeparator(fs *flag.FlagSet, format string, verbose, noSep bool, sep string) (string, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if verbose && format != "text" && format != "raw" {
		return "", fmt.Errorf("%w: -v prints \"topic payload\" lines; it goes with --format text or raw, not %s", errUsage, format)
	}
	if (set["separator"] || noSep) && !verbose && format != "raw" {
		return "", fmt.Errorf("%w: --separator and -N apply to --format raw and -v output", errUsage)
	}
	if set["separator"] && noSep {
		return "", fmt.Errorf("%w: -N and --separator exclude each other", errUsage)
	}
	if noSep {
		return "", nil
	}
	return parseSeparator(sep)
}

func validFormat(f string) bool {
	for _, s := range subFormats {
		if f == s {
			return true
		}
	}
	return false
}
