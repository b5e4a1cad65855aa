package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Gap           bool     `json:"gap,omitempty"`
}

// print writes m and flushes, so a reader of a pipe sees it at once.
func (p *subPrinter) print(m *client.Message) error {
	switch p.format {
	case "none":
		return nil
	case "raw":
		if m.Gap {
			return nil
		}
		_, _ = p.w.Write(m.Payload)
	case "json":
		j := subJSON{Topic: m.Topic, Seq: m.Seq, Retained: m.Retained, Gap: m.Gap}
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

// textLine is the text rendering of a message: topic, sequence, latency,
// payload (non-printable payloads are summarized).
func textLine(m *client.Message) string {
	var b strings.Builder
	if m.Gap {
		fmt.Fprintf(&b, "%s gap: messages lost", orUnknown(m.Topic))
		if m.Seq > 0 {
			fmt.Fprintf(&b, " before #%d", m.Seq)
		}
		b.WriteByte('\n')
		return b.String()
	}
	b.WriteString(m.Topic)
	if m.Seq > 0 {
		fmt.Fprintf(&b, " #%d", m.Seq)
	}
	if m.Retained {
		b.WriteString(" retained")
	}
	if !m.Sent.IsZero() {
		fmt.Fprintf(&b, " %.3fms", ms(m.Latency()))
	}
	b.WriteByte(' ')
	if utf8.Valid(m.Payload) && !strings.ContainsAny(string(m.Payload), "\n\r\x00") {
		b.Write(m.Payload)
	} else {
		fmt.Fprintf(&b, "<%d bytes>", len(m.Payload))
	}
	b.WriteByte('\n')
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "(topic unknown)"
	}
	return s
}

// subStats summarizes what a subscriber received.
type subStats struct {
	Count       int               // messages delivered (gaps and dropped duplicates excluded)
	Gaps        int               // gap announcements
	Dups        int               // QoS 1 redeliveries dropped by --dedup
	Latency     *qmetrics.Latency // of messages carrying the publisher's send time
	FirstSent   time.Time         // earliest publisher send time seen
	First, Last time.Time         // first and last delivery
}

func newSubStats(keepSamples bool) *subStats {
	keep := 0
	if keepSamples {
		keep = -1 // qmetrics.DefaultKeepSamples, for CDF plots
	}
	return &subStats{Latency: qmetrics.NewLatency(keep)}
}

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
	if s.Latency.Count() > 0 {
		l := s.Latency.Summary()
		fmt.Fprintf(&b, "; latency p50 %.3f ms, p99 %.3f ms, max %.3f ms", l.P50, l.P99, l.Max)
	}
	if s.Gaps > 0 {
		fmt.Fprintf(&b, "; %d gap(s)", s.Gaps)
	}
	if s.Dups > 0 {
		fmt.Fprintf(&b, "; %d duplicate(s) dropped", s.Dups)
	}
	return b.String()
}

func runSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sub", stderr)
	var cf clientFlags
	cf.register(fs)
	filter := fs.String("topic", "", "topic filter to subscribe to; MQTT wildcards + and # (required)")
	count := fs.Int("count", 0, "exit after N messages (0: until interrupted)")
	since := fs.Uint64("since", 0, "replay the broker's history after this sequence number first (HTTP/3)")
	format := fs.String("format", "text", "output: text, json (one object a line), raw (payload bytes only) or none")
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
	p := &subPrinter{w: bufio.NewWriter(stdout), format: *format}
	st := newSubStats(meter != nil)
	var dd *subDeduper
	if *dedup {
		dd = &subDeduper{}
	}
	var outErr error
	err = c.Subscribe(ctx, *filter, *since, func(m client.Message) {
		if outErr != nil || (*count > 0 && st.Count >= *count) {
			return // a message delivered after the cancel of --count is not printed
		}
		if dd != nil && dd.duplicate(&m) {
			st.Dups++
			log.Debug("duplicate dropped", "topic", m.Topic, "seq", m.Seq)
			return
		}
		st.add(&m)
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
		expected := uint64(*count)
		if expected == 0 {
			expected = uint64(st.Count)
		}
		m.SetDelivery(expected, uint64(st.Count), st.took())
	})
	return errors.Join(explainConnErr(err), merr)
}

func validFormat(f string) bool {
	for _, s := range subFormats {
		if f == s {
			return true
		}
	}
	return false
}
