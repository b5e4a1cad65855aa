package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/sockbuf"
)

// The reconnect workload: the NB-IoT PSM/eDRX pattern. A device wakes up,
// connects, publishes one message, closes and sleeps; the next wake-up is a
// new connection of the same process, which keeps its TLS session cache and
// its QUIC token store, so it resumes the session, starts from the RTT
// measured before (the token's) and, with 0-RTT, sends the publish in its
// first flight. Broker and publisher run in this process over the link
// emulator (the publisher's side only).

// ReconnectOptions configure Reconnect. Link, Profile and Broker tuning are
// required in the sense that their zero values are filled in.
type ReconnectOptions struct {
	// Link starts the publisher's link emulator; required.
	Link Link
	// Seed seeds the link's loss; zero means 1. RunReconnectStudy gives
	// each repeat its own (the same for every variant within it), so
	// repeats do not lose the same datagrams.
	Seed int64
	// Profile is the link profile's name, e.g. "nbiot"; required.
	Profile string
	// Proto is ProtoH3 (request mode; 0-RTT when Tuning allows it) or
	// ProtoMQTT (MQTT over QUIC, resuming its TLS session and presenting
	// the broker's token too); "" means ProtoH3.
	Proto string
	// Tuning is the QUIC profile of broker and client; nil means lean.
	Tuning *quictune.Profile
	// Wakeups is how many connect-publish-close cycles run; zero means 5.
	Wakeups int
	// Sleep is the pause between wake-ups; zero means 1 s.
	Sleep time.Duration
	// Payload is the message size in bytes; zero means 256.
	Payload int
	// ProbeHold passes the previous wake-up's smoothed RTT as the next
	// one's client.Options.HandshakeRTT: handshake probes
	// are held back for 1.5 of it.
	ProbeHold bool
	// Logger receives diagnostics; nil means discard.
	Logger *slog.Logger
}

// Wakeup is what one wake-up measured.
type Wakeup struct {
	// TTFDMs is the time from the application's publish call (no
	// connection yet) to the broker's acknowledgement.
	TTFDMs float64 `json:"ttfd_ms"`
	// RadioOnMs is the time from the first to the last datagram of the
	// wake-up on the device's socket (sent or received).
	RadioOnMs float64 `json:"radio_on_ms"`
	// Bytes and Datagrams count both directions on the device's socket.
	Bytes     int64 `json:"bytes"`
	Datagrams int64 `json:"datagrams"`
	// Used0RTT is whether the publish went in 0-RTT data.
	Used0RTT bool `json:"used_0rtt"`
	// HoldMs is the handshake probe hold's RTT the client started with
	// (0: none); HoldFromSession says it came from the session file.
	HoldMs          float64 `json:"hold_ms"`
	HoldFromSession bool    `json:"hold_from_session,omitempty"`
	// Floor is this wake-up's floor on the link model from its own
	// datagrams (floor.go): the cold construction for the first wake-up of
	// a run, the warm one for the others; nil when the sequence lacks a step.
	Floor *Floor `json:"floor,omitempty"`
	// Trace is the wake-up's datagrams on the device's socket.
	Trace []Datagram `json:"trace,omitempty"`
}

// Reconnect runs the reconnect workload over HTTP/3 (request mode) or MQTT
// over QUIC and returns each wake-up's figures; the first wake-up is a cold start.
func Reconnect(ctx context.Context, o ReconnectOptions) ([]Wakeup, error) {
	if o.Link == nil || o.Profile == "" {
		return nil, errors.New("reconnect: no link or profile")
	}
	if o.Tuning == nil {
		o.Tuning = quictune.Lean()
	}
	if o.Wakeups == 0 {
		o.Wakeups = 5
	}
	if o.Sleep == 0 {
		o.Sleep = time.Second
	}
	if o.Payload == 0 {
		o.Payload = 256
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", Certificates: []tls.Certificate{cert.TLS}, Tuning: o.Tuning, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	if err := b.Start(); err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	defer b.Close()
	upstream, scheme := b.Addr().String(), "https"
	switch o.Proto {
	case "", ProtoH3:
	case ProtoMQTT:
		ms, err := mqttquic.New(mqttquic.Options{QUICAddr: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}},
			Broker: b, Tuning: o.Tuning, Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("reconnect: %w", err)
		}
		if err := ms.Start(); err != nil {
			return nil, fmt.Errorf("reconnect: %w", err)
		}
		defer ms.Close()
		upstream, scheme = ms.QUICAddr().String(), "mqtt-quic"
	default:
		return nil, fmt.Errorf("reconnect: unknown protocol %q", o.Proto)
	}
	seed := o.Seed
	if seed == 0 {
		seed = 1
	}
	addr, lk, err := o.Link.Start(ctx, o.Profile, upstream, seed)
	if err != nil {
		return nil, fmt.Errorf("reconnect: link: %w", err)
	}
	defer lk.Close()

	// The session cache is a session file, as a PSM device's publisher
	// keeps it (--session-file): with the tuning's
	// handshake_rtt_from_session the next wake-up starts its probe hold
	// from the RTT the last one recorded there.
	dir, err := os.MkdirTemp("", "quiot-reconnect-")
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	defer os.RemoveAll(dir)
	cache := client.NewFileSessionCache(filepath.Join(dir, "session.json"), o.Logger)
	tokens := quic.NewLRUTokenStore(4, 2)
	payload := make([]byte, o.Payload)
	var out []Wakeup
	var rtt time.Duration
	for i := range o.Wakeups {
		if i > 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(o.Sleep):
			}
		}
		w, srtt, err := wakeOnce(ctx, scheme+"://"+addr, o, cache, tokens, payload, rtt)
		if err != nil {
			return out, fmt.Errorf("reconnect: wake-up %d: %w", i+1, err)
		}
		info, _ := o.Link.Info(o.Profile)
		var f Floor
		var ok bool
		if i == 0 {
			f, ok = ColdFloor(w.Trace, w.TTFDMs, info)
		} else {
			f, ok = WarmFloor(w.Trace, info)
		}
		if ok {
			w.Floor = &f
		}
		out = append(out, w)
		if o.ProbeHold {
			rtt = srtt
		}
	}
	return out, nil
}

// wakeOnce is one connect-publish-close cycle.
func wakeOnce(ctx context.Context, url string, o ReconnectOptions, cache tls.ClientSessionCache, tokens quic.TokenStore, payload []byte, rtt time.Duration) (Wakeup, time.Duration, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return Wakeup{}, 0, err
	}
	pc := &radioConn{Conn: sockbuf.Wrap(udp)}
	defer udp.Close()
	var used0RTT bool
	c, err := client.New(client.Options{
		Broker: url, Insecure: true, Tuning: o.Tuning, SessionCache: cache, TokenStore: tokens,
		PacketConn: pc, Logger: o.Logger, HandshakeRTT: rtt,
	})
	if err != nil {
		return Wakeup{}, 0, err
	}
	start := time.Now()
	pc.start(start)
	if _, err := c.Publish(ctx, "wake/up", payload, client.PublishOptions{QoS: 1}); err != nil {
		_ = c.Close()
		return Wakeup{}, 0, err
	}
	ttfd := time.Since(start)
	used0RTT = client.Used0RTT(c)
	srtt := client.SmoothedRTT(c)
	if err := c.Close(); err != nil {
		return Wakeup{}, 0, err
	}
	// The CONNECTION_CLOSE is the wake-up's last datagram; the socket
	// stays open a moment for stragglers of the broker.
	w := pc.summary()
	hold, fromSession := client.HandshakeHold(c)
	w.HoldMs, w.HoldFromSession = float64(hold)/float64(time.Millisecond), fromSession
	w.TTFDMs = float64(ttfd) / float64(time.Millisecond)
	w.Used0RTT = used0RTT
	return w, srtt, nil
}

// radioConn counts a wake-up's datagrams and their first and last times,
// and records each one's direction, size, time and QUIC packet types.
type radioConn struct {
	sockbuf.Conn // passes quic-go's buffer sizing through
	mu           sync.Mutex
	t0           time.Time
	first, last  time.Time
	bytes, n     int64
	trace        []Datagram
}

// start sets the time the trace counts from (the publish call).
func (c *radioConn) start(t time.Time) {
	c.mu.Lock()
	c.t0 = t
	c.mu.Unlock()
}

func (c *radioConn) note(dir Dir, p []byte) {
	now := time.Now()
	pkts := ClassifyPackets(p)
	c.mu.Lock()
	if c.first.IsZero() {
		c.first = now
	}
	c.last = now
	c.bytes += int64(len(p))
	c.n++
	c.trace = append(c.trace, Datagram{Dir: dir, Size: len(p), AtMs: msSince(c.t0, now), Packets: pkts})
	c.mu.Unlock()
}

// ReadFrom implements net.PacketConn.
func (c *radioConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.note(Down, p[:n])
	}
	return n, a, err
}

// WriteTo implements net.PacketConn.
func (c *radioConn) WriteTo(p []byte, a net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, a)
	if err == nil {
		c.note(Up, p[:n])
	}
	return n, err
}

func (c *radioConn) summary() Wakeup {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Wakeup{RadioOnMs: float64(c.last.Sub(c.first)) / float64(time.Millisecond), Bytes: c.bytes, Datagrams: c.n,
		Trace: append([]Datagram(nil), c.trace...)}
}

// ReconnectVariant is one column of the reconnect comparison.
type ReconnectVariant struct {
	// Name labels the variant in the report.
	Name string `json:"name"`
	// Proto is ProtoH3 or ProtoMQTT.
	Proto string `json:"proto"`
	// ZeroRTT turns on allow_0rtt (broker and client).
	ZeroRTT bool `json:"zero_rtt"`
	// ProbeHold holds handshake probes back for 1.5 x the previous
	// wake-up's RTT, passed by hand (ReconnectOptions.ProbeHold).
	ProbeHold bool `json:"probe_hold"`
	// SessionRTT sets handshake_rtt_from_session (lean's default): each
	// wake-up holds its handshake probes back for 1.5 x the RTT the last
	// one recorded in the session file. False turns it off.
	SessionRTT bool `json:"session_rtt"`

	// The variant's results, filled in by Summarize: medians over the
	// runs' first (cold) wake-ups, median and 90th percentile over the
	// others (warm), in ms.
	ColdTTFDMs    float64 `json:"cold_ttfd_ms"`
	WarmTTFDP50Ms float64 `json:"warm_ttfd_p50_ms"`
	WarmTTFDP90Ms float64 `json:"warm_ttfd_p90_ms"`
	// FloorColdMs and FloorWarmMs are the floors from this variant's own
	// datagrams (the lower median over its wake-ups; 0: none computed).
	FloorColdMs float64 `json:"floor_cold_ms"`
	FloorWarmMs float64 `json:"floor_warm_ms"`
	// ColdXFloor, WarmP50XFloor and WarmP90XFloor are the TTFDs as
	// multiples of the study's floors (ReconnectStudy.FloorColdMs and
	// FloorWarmMs; 0 without a floor).
	ColdXFloor    float64 `json:"cold_x_floor"`
	WarmP50XFloor float64 `json:"warm_p50_x_floor"`
	WarmP90XFloor float64 `json:"warm_p90_x_floor"`
}

// DefaultReconnectVariants compares HTTP/3 with and without 0-RTT, with
// the probe hold that lean sets by default (the RTT from the session file)
// and without it (the 2 s hold of a client that knows no RTT), and MQTT
// over QUIC with session resumption, the token's RTT and the probe hold,
// with 0-RTT (CONNECT and the first PUBLISH in the first flight) and
// without (the PUBLISH follows the CONNECT with the handshake's Finished).
func DefaultReconnectVariants() []ReconnectVariant {
	return []ReconnectVariant{
		{Name: "HTTP/3, 0-RTT, hold from the session file (lean's default)", Proto: ProtoH3, ZeroRTT: true, SessionRTT: true},
		{Name: "HTTP/3, 0-RTT, no hold", Proto: ProtoH3, ZeroRTT: true},
		{Name: "HTTP/3, no 0-RTT, hold from the session file", Proto: ProtoH3, SessionRTT: true},
		{Name: "MQTT/QUIC, 0-RTT, hold from the session file", Proto: ProtoMQTT, ZeroRTT: true, SessionRTT: true},
		{Name: "MQTT/QUIC", Proto: ProtoMQTT, SessionRTT: true},
	}
}

// ReconnectStudy is the reconnect comparison's result (reconnect.json).
type ReconnectStudy struct {
	// Link is the link profile.
	Link LinkInfo `json:"link"`
	// Tuning is the base QUIC profile's name.
	Tuning string `json:"tuning"`
	// Payload, Wakeups, Repeat and SleepMs are the workload.
	Payload int     `json:"payload"`
	Wakeups int     `json:"wakeups"`
	Repeat  int     `json:"repeat"`
	SleepMs float64 `json:"sleep_ms"`
	// Host and Version say where and with what it ran.
	Host    Host   `json:"host"`
	Version string `json:"version"`
	// Runs holds each variant's wake-ups, one list per repeat.
	Runs map[string][][]Wakeup `json:"runs"`
	// Variants lists the variants in report order, with their results.
	Variants []ReconnectVariant `json:"variants"`
	// FloorWarmMs and FloorColdMs are the link's floors (floor.go) for a
	// resumed and a first connection: the lowest of the variants' own
	// floors, so every variant is measured against the leanest handshake
	// seen on this link. FloorWarm and FloorCold show how they add up.
	FloorWarmMs float64 `json:"floor_warm_ms"`
	FloorColdMs float64 `json:"floor_cold_ms"`
	FloorWarm   *Floor  `json:"floor_warm,omitempty"`
	FloorCold   *Floor  `json:"floor_cold,omitempty"`
}

// Summarize fills in the variants' results and the study's floors from
// the runs.
func (st *ReconnectStudy) Summarize() {
	st.FloorWarmMs, st.FloorColdMs, st.FloorWarm, st.FloorCold = 0, 0, nil, nil
	for i := range st.Variants {
		v := &st.Variants[i]
		f := st.figures(v.Name)
		v.ColdTTFDMs, v.WarmTTFDP50Ms, v.WarmTTFDP90Ms = f.coldTTFD, f.warmTTFD, f.warmP90TTFD
		var cold, warm []Floor
		for _, ws := range st.Runs[v.Name] {
			for j, w := range ws {
				switch {
				case w.Floor == nil:
				case j == 0:
					cold = append(cold, *w.Floor)
				default:
					warm = append(warm, *w.Floor)
				}
			}
		}
		v.FloorColdMs, v.FloorWarmMs = 0, 0
		if c, ok := lowerMedian(cold); ok {
			v.FloorColdMs = c.Ms
			if st.FloorCold == nil || c.Ms < st.FloorCold.Ms {
				st.FloorCold = &c
			}
		}
		if w, ok := lowerMedian(warm); ok {
			v.FloorWarmMs = w.Ms
			if st.FloorWarm == nil || w.Ms < st.FloorWarm.Ms {
				st.FloorWarm = &w
			}
		}
	}
	if st.FloorCold != nil {
		st.FloorColdMs = st.FloorCold.Ms
	}
	if st.FloorWarm != nil {
		st.FloorWarmMs = st.FloorWarm.Ms
	}
	for i := range st.Variants {
		v := &st.Variants[i]
		v.ColdXFloor = ratio(v.ColdTTFDMs, st.FloorColdMs)
		v.WarmP50XFloor = ratio(v.WarmTTFDP50Ms, st.FloorWarmMs)
		v.WarmP90XFloor = ratio(v.WarmTTFDP90Ms, st.FloorWarmMs)
	}
}

// ratio is a/b rounded to 0.01, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return math.Round(100*a/b) / 100
}

// RunReconnectStudy runs every variant repeat times over base (lean when
// nil) on profile.
func RunReconnectStudy(ctx context.Context, link Link, profile string, base *quictune.Profile, variants []ReconnectVariant, wakeups, repeat, payload int, sleep time.Duration, log *slog.Logger) (*ReconnectStudy, error) {
	info, ok := link.Info(profile)
	if !ok {
		return nil, fmt.Errorf("unknown link profile %q", profile)
	}
	if base == nil {
		base = quictune.Lean()
	}
	st := &ReconnectStudy{Link: info, Tuning: base.Name, Payload: payload, Wakeups: wakeups, Repeat: repeat,
		SleepMs: float64(sleep) / float64(time.Millisecond), Runs: map[string][][]Wakeup{}, Variants: append([]ReconnectVariant(nil), variants...)}
	defer st.Summarize()
	for r := range repeat {
		for _, v := range variants {
			tun := *base
			tun.Allow0RTT = v.ZeroRTT
			tun.SessionResumption = true
			tun.HandshakeRTTFromSession = v.SessionRTT
			ws, err := Reconnect(ctx, ReconnectOptions{Link: link, Seed: int64(r + 1), Profile: profile, Proto: v.Proto, Tuning: &tun,
				Wakeups: wakeups, Sleep: sleep, Payload: payload, Logger: log, ProbeHold: v.ProbeHold})
			if err != nil {
				return st, fmt.Errorf("%s, repeat %d: %w", v.Name, r+1, err)
			}
			st.Runs[v.Name] = append(st.Runs[v.Name], ws)
		}
	}
	return st, nil
}

// reconnectFigures are a variant's medians: cold (first wake-up of each
// repeat) and warm (the others).
type reconnectFigures struct {
	coldTTFD, warmTTFD, warmP90TTFD, coldBytes, warmBytes, coldRadio, warmRadio, warm0RTT, warmHold float64
	n                                                                                               int
}

func (st *ReconnectStudy) figures(name string) reconnectFigures {
	var ct, wt, cb, wb, cr, wr, wh []float64
	used := 0
	for _, ws := range st.Runs[name] {
		for i, w := range ws {
			if i == 0 {
				ct, cb, cr = append(ct, w.TTFDMs), append(cb, float64(w.Bytes)), append(cr, w.RadioOnMs)
				continue
			}
			wt, wb, wr, wh = append(wt, w.TTFDMs), append(wb, float64(w.Bytes)), append(wr, w.RadioOnMs), append(wh, w.HoldMs)
			if w.Used0RTT {
				used++
			}
		}
	}
	f := reconnectFigures{coldTTFD: Median(ct), warmTTFD: Median(wt), warmP90TTFD: Quantile(wt, 0.9), coldBytes: Median(cb),
		warmBytes: Median(wb), coldRadio: Median(cr), warmRadio: Median(wr), warmHold: Median(wh), n: len(wt)}
	if len(wt) > 0 {
		f.warm0RTT = float64(used) / float64(len(wt))
	}
	return f
}

// ReconnectBoundMs is the done criterion of issue 12 for a reconnect with
// 0-RTT: 1.5 RTT plus the payload's serialization time on the uplink.
func (st *ReconnectStudy) ReconnectBoundMs() float64 {
	b := 1.5 * st.Link.RTTMs()
	if st.Link.RateKbps > 0 {
		b += 8 * float64(st.Payload) / st.Link.RateKbps
	}
	return b
}

// floorText writes a floor and its legs, or "not computed".
func floorText(f *Floor) string {
	if f == nil {
		return "not computed"
	}
	return f.String()
}

// times writes a/b as "1.05×", or "–" without b.
func times(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// WriteMarkdown writes the comparison table.
func (st *ReconnectStudy) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Reconnect workload (NB-IoT PSM/eDRX pattern) on %s\n\n", st.Link.Name)
	fmt.Fprintf(&b, "Each wake-up: a new connection, one %d B QoS 1 publish, close, sleep %.0f ms; %d wake-ups per run, %d runs per variant, tuning %s. "+
		"The first wake-up of a run is cold (no session ticket, no token); the later ones resume the TLS session and present the broker's NEW_TOKEN "+
		"(quic-go v0.65 restores the RTT from it, but its handshake PTO stays 2 x 100 ms until the connection has an RTT sample of its own; "+
		"the probe hold holds those probes back for 1.5 x the RTT the previous wake-up recorded in the session file: lean's handshake_rtt_from_session; "+
		"a wake-up with no RTT known, the cold one and every one without the session file's RTT, holds them for 2 s). "+
		"Hold: the median RTT the warm wake-ups' hold started from (0: none known, 2 s). TTFD: the application's publish call -> the broker's acknowledgement. "+
		"Radio on: first to last datagram of the wake-up on the device's socket. Bytes: both directions. Medians.\n\n",
		st.Payload, st.SleepMs, st.Wakeups, st.Repeat, st.Tuning)
	fmt.Fprintf(&b, "Host: %s, %s/%s, %d CPUs (%s), %s; quiot %s.\n\n", st.Host.Hostname, st.Host.OS, st.Host.Arch, st.Host.CPUs, st.Host.CPUModel, st.Host.Go, st.Version)
	fmt.Fprintf(&b, "Link: RTT %.0f ms, %.0f kbit/s, loss %.1f %%. Done criterion for HTTP/3 with 0-RTT: warm TTFD <= 1.5 RTT + payload serialization = %.0f ms.\n\n",
		st.Link.RTTMs(), st.Link.RateKbps, st.Link.LossPct, st.ReconnectBoundMs())
	fmt.Fprintf(&b, "Floors (the link model and the handshake's datagrams as this run sent them, IP/UDP headers included; no jitter, no loss): "+
		"warm %s; cold %s. Each variant's own floors are in reconnect.json.\n\n", floorText(st.FloorWarm), floorText(st.FloorCold))
	b.WriteString("| variant | cold TTFD ms | × cold floor | warm TTFD ms | × warm floor | warm TTFD p90 ms | p90 × warm floor | warm TTFD / RTT | cold bytes | warm bytes | cold radio-on ms | warm radio-on ms | warm in 0-RTT | warm hold ms |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	rtt := st.Link.RTTMs()
	for _, v := range st.Variants {
		f := st.figures(v.Name)
		ratio := "–"
		if rtt > 0 {
			ratio = fmt.Sprintf("%.2f", f.warmTTFD/rtt)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %.0f | %s | %.0f | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f %% | %.0f |\n", v.Name,
			f.coldTTFD, times(f.coldTTFD, st.FloorColdMs), f.warmTTFD, times(f.warmTTFD, st.FloorWarmMs), f.warmP90TTFD, times(f.warmP90TTFD, st.FloorWarmMs), ratio,
			f.coldBytes, f.warmBytes, f.coldRadio, f.warmRadio, 100*f.warm0RTT, f.warmHold)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
