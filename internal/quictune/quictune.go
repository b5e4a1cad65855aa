// Package quictune maps named QUIC tuning profiles ("default", "lean", or a
// TOML file) to a quic.Config and TLS settings. The lean values are first
// guesses refined by `quiot bench` (see docs/TUNING.md once generated).
package quictune

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/quic-go/quic-go"
)

// Duration is a time.Duration that reads from TOML strings such as "30s".
type Duration time.Duration

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Profile is a set of QUIC, TLS and HTTP/3 knobs. A zero field means
// quic-go's default for that knob.
type Profile struct {
	// Name identifies the profile in logs and results.
	Name string `toml:"name" json:"name"`
	// HandshakeIdleTimeout bounds the handshake; zero means quic-go's 5 s.
	HandshakeIdleTimeout Duration `toml:"handshake_idle_timeout" json:"handshake_idle_timeout"`
	// MaxIdleTimeout closes a silent connection; zero means quic-go's 30 s.
	MaxIdleTimeout Duration `toml:"max_idle_timeout" json:"max_idle_timeout"`
	// KeepAlivePeriod sends PINGs when idle; zero means no keep-alive. It must
	// stay below MaxIdleTimeout (Validate checks).
	KeepAlivePeriod Duration `toml:"keep_alive_period" json:"keep_alive_period"`
	// InitialStreamReceiveWindow is the initial per-stream flow-control
	// window; zero means quic-go's 512 KiB.
	InitialStreamReceiveWindow uint64 `toml:"initial_stream_receive_window" json:"initial_stream_receive_window"`
	// MaxStreamReceiveWindow caps auto-tuning of the stream window; zero means
	// quic-go's 6 MiB.
	MaxStreamReceiveWindow uint64 `toml:"max_stream_receive_window" json:"max_stream_receive_window"`
	// InitialConnectionReceiveWindow is the initial connection window; zero
	// means quic-go's 768 KiB.
	InitialConnectionReceiveWindow uint64 `toml:"initial_connection_receive_window" json:"initial_connection_receive_window"`
	// MaxConnectionReceiveWindow caps the connection window; zero means
	// quic-go's 15 MiB.
	MaxConnectionReceiveWindow uint64 `toml:"max_connection_receive_window" json:"max_connection_receive_window"`
	// MaxIncomingStreams is the bidirectional stream limit granted to the
	// peer (the MAX_STREAMS high-watermark); zero means quic-go's 100.
	MaxIncomingStreams int64 `toml:"max_incoming_streams" json:"max_incoming_streams"`
	// MaxIncomingUniStreams is the unidirectional stream limit; zero means
	// quic-go's 100.
	MaxIncomingUniStreams int64 `toml:"max_incoming_uni_streams" json:"max_incoming_uni_streams"`
	// InitialPacketSize is the first datagram size; zero means quic-go's 1280.
	InitialPacketSize uint16 `toml:"initial_packet_size" json:"initial_packet_size"`
	// DisablePathMTUDiscovery turns off DPLPMTUD probing.
	DisablePathMTUDiscovery bool `toml:"disable_path_mtu_discovery" json:"disable_path_mtu_discovery"`
	// SessionResumption enables TLS session tickets on clients (a session
	// cache) and servers.
	SessionResumption bool `toml:"session_resumption" json:"session_resumption"`
	// Allow0RTT lets clients send early data on resumed sessions and servers
	// accept it (only idempotent requests should be sent early).
	Allow0RTT bool `toml:"allow_0rtt" json:"allow_0rtt"`
	// HandshakeRTT is the RTT a client expects to its broker (e.g. "1.5s"
	// on NB-IoT): until the broker's first datagram arrives, the HTTP/3
	// client holds back quic-go's handshake probes (2 x 100 ms, doubling,
	// whatever the link) for 1.5 x this. Zero means none known: the client
	// holds them for 2 s (docs/TUNING.md, "the probe hold").
	// Clients only; a client's Options.HandshakeRTT (the RTT of an earlier
	// connection) takes precedence.
	HandshakeRTT Duration `toml:"handshake_rtt" json:"handshake_rtt"`
	// HandshakeRTTFromSession lets a client (HTTP/3, MQTT over QUIC) whose session cache
	// remembers the RTT of its last connection to the broker (the
	// publisher's --session-file) hold its handshake probes for 1.5 x that
	// RTT, as handshake_rtt does, when neither handshake_rtt nor the
	// client's Options.HandshakeRTT sets one. On in lean.
	HandshakeRTTFromSession bool `toml:"handshake_rtt_from_session" json:"handshake_rtt_from_session"`
	// ProbeGovernor puts the broker's UDP sockets (HTTP/3, MQTT over QUIC)
	// under a probe governor (internal/quicgov): for a client IP whose
	// handshake answer time it learned from earlier connections, the
	// broker's Initial and Handshake probes are held for 1.5 x that time
	// instead of queuing on a slow downlink ahead of its answer
	// (docs/results/nbiot/README.md). Brokers only; on in lean.
	ProbeGovernor bool `toml:"probe_governor" json:"probe_governor"`
	// FirstFlightCopies sends each datagram of a handshake's first flight
	// once more after the flight, unless the peer answered first: on a
	// client (HTTP/3, MQTT over QUIC, the broker's MQTT over QUIC
	// bridges) 20 ms after it when it knows an RTT to the broker
	// (handshake_rtt, the session file), on a broker with probe_governor
	// a quarter of the answer time it learned for the client's IP after
	// it (behind its answer to the client's 0-RTT data). On a slow link
	// the copies wait behind the flight and go while the sender waits
	// for the answer anyway, and a lost first datagram is repaired a
	// flight's airtime later instead of by a probe seconds later
	// (docs/TUNING.md, "First-flight copies"); they cost the first
	// flight's bytes again. On in lean.
	FirstFlightCopies bool `toml:"first_flight_copies" json:"first_flight_copies"`
}

// Default is quic-go's own configuration, unchanged.
func Default() *Profile {
	return &Profile{Name: "default", SessionResumption: true}
}

// Lean is the profile for constrained devices and poor links: small windows
// (a Pi Zero has 512 MB and links carry tens of kbit/s), a stream limit large
// enough that MAX_STREAMS credit is refreshed rarely, keep-alive well below
// the idle timeout (NAT bindings on cellular links expire in ~30-60 s), a
// handshake timeout fit for multi-second RTTs, and the safe 1200-byte
// initial packet with path MTU discovery off: its probes (up to 1452-byte
// datagrams right after the handshake) occupy a 20 kbit/s NB-IoT uplink for
// about half a second each, ahead of the first messages, and cost 45 % of
// the wire bytes per message on a lossy link (docs/TUNING.md); IoT payloads
// fit in 1200-byte packets anyway. 0-RTT is on: a resumed wake-up's
// publish goes with the handshake, which halves a warm wake-up on NB-IoT
// (1.04x the link's floor instead of 1.9x). It is safe because quiot's
// clients send only a publish with a message id in early data and quiot's
// broker, with this profile, publishes an id once and answers anything else
// sent early 425 / serves it after the handshake (docs/TUNING.md, "0-RTT").
func Lean() *Profile {
	return &Profile{
		Name:                           "lean",
		HandshakeIdleTimeout:           Duration(20 * time.Second),
		MaxIdleTimeout:                 Duration(90 * time.Second),
		KeepAlivePeriod:                Duration(25 * time.Second),
		InitialStreamReceiveWindow:     64 << 10,
		MaxStreamReceiveWindow:         256 << 10,
		InitialConnectionReceiveWindow: 128 << 10,
		MaxConnectionReceiveWindow:     512 << 10,
		MaxIncomingStreams:             1000,
		MaxIncomingUniStreams:          16,
		InitialPacketSize:              1200,
		DisablePathMTUDiscovery:        true,
		SessionResumption:              true,
		Allow0RTT:                      true,
		HandshakeRTTFromSession:        true,
		ProbeGovernor:                  true,
		FirstFlightCopies:              true,
	}
}

// Names lists the built-in profiles.
func Names() []string { return []string{"default", "lean"} }

// Load returns a built-in profile by name, or reads a TOML profile file.
// A file profile starts from Lean, so it names only the knobs it changes,
// unless it sets base = "default".
func Load(nameOrFile string) (*Profile, error) {
	switch nameOrFile {
	case "", "default":
		return Default(), nil
	case "lean":
		return Lean(), nil
	}
	b, err := os.ReadFile(nameOrFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("unknown tuning profile %q (want default, lean or a TOML file)", nameOrFile)
		}
		return nil, fmt.Errorf("couldn't read tuning profile: %w", err)
	}
	return Parse(b, nameOrFile)
}

// Parse reads a TOML profile; source names it in errors.
func Parse(b []byte, source string) (*Profile, error) {
	var base struct {
		Base string `toml:"base"`
	}
	if _, err := toml.Decode(string(b), &base); err != nil {
		return nil, fmt.Errorf("tuning profile %s: %w", source, err)
	}
	p := Lean()
	switch base.Base {
	case "", "lean":
	case "default":
		p = Default()
	default:
		return nil, fmt.Errorf("tuning profile %s: unknown base %q", source, base.Base)
	}
	p.Name = source
	md, err := toml.Decode(string(b), p)
	if err != nil {
		return nil, fmt.Errorf("tuning profile %s: %w", source, err)
	}
	for _, k := range md.Undecoded() {
		if k.String() != "base" {
			return nil, fmt.Errorf("tuning profile %s: unknown key %q", source, k.String())
		}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("tuning profile %s: %w", source, err)
	}
	return p, nil
}

// Validate reports inconsistent knobs.
func (p *Profile) Validate() error {
	idle := time.Duration(p.MaxIdleTimeout)
	if idle == 0 {
		idle = 30 * time.Second
	}
	if p.KeepAlivePeriod != 0 && time.Duration(p.KeepAlivePeriod) >= idle {
		return fmt.Errorf("keep_alive_period %v must be below max_idle_timeout %v", time.Duration(p.KeepAlivePeriod), idle)
	}
	if p.InitialPacketSize != 0 && p.InitialPacketSize < 1200 {
		return fmt.Errorf("initial_packet_size %d is below QUIC's minimum of 1200", p.InitialPacketSize)
	}
	if p.MaxStreamReceiveWindow != 0 && p.InitialStreamReceiveWindow > p.MaxStreamReceiveWindow {
		return errors.New("initial_stream_receive_window exceeds max_stream_receive_window")
	}
	if p.MaxConnectionReceiveWindow != 0 && p.InitialConnectionReceiveWindow > p.MaxConnectionReceiveWindow {
		return errors.New("initial_connection_receive_window exceeds max_connection_receive_window")
	}
	if p.HandshakeRTT < 0 {
		return errors.New("handshake_rtt must not be negative")
	}
	if p.MaxIncomingStreams < 0 || p.MaxIncomingUniStreams < 0 {
		return errors.New("stream limits must not be negative")
	}
	return nil
}

// maxStreamLimit caps StreamLimit (quic-go's own bound is far higher, but
// each stream the peer may open is state the broker holds).
const maxStreamLimit = 1 << 20

// StreamLimit is the number of concurrent bidirectional streams the
// profile grants a peer: MaxIncomingStreams, or quic-go's 100 when zero,
// at most 1<<20.
func (p *Profile) StreamLimit() int {
	if p.MaxIncomingStreams <= 0 {
		return 100
	}
	return int(min(p.MaxIncomingStreams, maxStreamLimit))
}

// WithStreamLimit returns the profile with its bidirectional stream limit
// set to n (a broker's --max-streams-per-conn): p itself when it already
// grants n, else a copy.
func (p *Profile) WithStreamLimit(n int) *Profile {
	if p.MaxIncomingStreams == int64(n) {
		return p
	}
	c := *p
	c.MaxIncomingStreams = int64(n)
	return &c
}

// QUICConfig returns a fresh quic.Config for the profile. Callers may set
// Tracer on it.
func (p *Profile) QUICConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           time.Duration(p.HandshakeIdleTimeout),
		MaxIdleTimeout:                 time.Duration(p.MaxIdleTimeout),
		KeepAlivePeriod:                time.Duration(p.KeepAlivePeriod),
		InitialStreamReceiveWindow:     p.InitialStreamReceiveWindow,
		MaxStreamReceiveWindow:         p.MaxStreamReceiveWindow,
		InitialConnectionReceiveWindow: p.InitialConnectionReceiveWindow,
		MaxConnectionReceiveWindow:     p.MaxConnectionReceiveWindow,
		MaxIncomingStreams:             p.MaxIncomingStreams,
		MaxIncomingUniStreams:          p.MaxIncomingUniStreams,
		InitialPacketSize:              p.InitialPacketSize,
		DisablePathMTUDiscovery:        p.DisablePathMTUDiscovery,
		Allow0RTT:                      p.Allow0RTT,
	}
}

// ApplyClientTLS sets the profile's TLS knobs on a client config: TLS 1.3
// only, and a session cache when resumption is on. Go's crypto/tls already
// prefers ChaCha20-Poly1305 on CPUs without AES instructions (the Pi Zero's
// ARM1176), so no cipher list is forced here.
func (p *Profile) ApplyClientTLS(c *tls.Config) {
	c.MinVersion = tls.VersionTLS13
	c.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
	if p.SessionResumption && c.ClientSessionCache == nil {
		c.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	}
	if !p.SessionResumption {
		c.ClientSessionCache = nil
	}
	if c.KeyLogWriter == nil {
		c.KeyLogWriter = KeyLogWriter() // $SSLKEYLOGFILE, with a loud warning
	}
}

// ApplyServerTLS sets the profile's TLS knobs on a server config. Both
// Apply functions honour $SSLKEYLOGFILE (see KeyLogWriter).
func (p *Profile) ApplyServerTLS(c *tls.Config) {
	c.MinVersion = tls.VersionTLS13
	c.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
	c.SessionTicketsDisabled = !p.SessionResumption
	if c.KeyLogWriter == nil {
		c.KeyLogWriter = KeyLogWriter() // $SSLKEYLOGFILE, with a loud warning
	}
}
