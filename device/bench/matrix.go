package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Protocols and publish modes of the matrix.
const (
	ProtoH3   = "h3"
	ProtoMQTT = "mqtt"

	ModeRequest = "request" // HTTP/3: one POST per message
	ModeStream  = "stream"  // HTTP/3: one long-lived POST carrying frames
	ModeMQTT    = "mqtt"    // MQTT PUBLISH on the single MQTT stream
)

// Tuning is one QUIC tuning configuration of the matrix: a named profile
// ("default", "lean"), a TOML profile file, or a study variant that changes
// one knob of a base profile.
type Tuning struct {
	// Name identifies the tuning in results ("default", "lean",
	// "lean/max_incoming_streams=10", ...).
	Name string `json:"name"`
	// Knob and Value name the knob a study variant changes; empty for the
	// base profiles.
	Knob  string `json:"knob,omitempty"`
	Value string `json:"value,omitempty"`
	// Profile is what the roles get as --tuning: "default", "lean" or the
	// path of a TOML file. When TOML is set, the runner writes it to a file
	// in the output directory and passes that instead.
	Profile string `json:"profile"`
	// TOML is a profile file's content (knob overrides on Base); empty means
	// Profile is used as it is.
	TOML string `json:"toml,omitempty"`
	// Env is extra environment for every role process (e.g. GODEBUG
	// settings that change the cipher suite crypto/tls picks).
	Env []string `json:"env,omitempty"`
	// PubArgs and SubArgs are extra flags for the publisher and subscriber
	// (e.g. per-request authentication).
	PubArgs []string `json:"pub_args,omitempty"`
	SubArgs []string `json:"sub_args,omitempty"`
	// BrokerArgs are extra flags for the broker.
	BrokerArgs []string `json:"broker_args,omitempty"`
	// Auth, when set, is an ACL file's content (broker/auth): the runner
	// writes it into the run directory and starts the broker with --auth
	// on it. The clients' credentials go in PubArgs and SubArgs.
	Auth string `json:"auth,omitempty"`
}

// Spec is the experiment matrix and the per-run workload.
type Spec struct {
	// Protos are the protocols: "h3", "mqtt".
	Protos []string
	// Modes are the HTTP/3 publish modes ("request", "stream"); MQTT always
	// runs in mode "mqtt".
	Modes []string
	// Tunings are the QUIC tuning configurations.
	Tunings []Tuning
	// Profiles are link profile names (see internal/linkprofile).
	Profiles []string
	// Payloads are payload sizes in bytes.
	Payloads []int
	// Repeat is the number of repeats of every configuration.
	Repeat int
	// Count is the number of messages a publisher sends per run.
	Count int
	// Rate is the publish rate in messages per second; 0 means as fast as
	// acknowledgements allow.
	Rate float64
	// QoS is the publish QoS (0 or 1); TTFD needs 1 (the broker's
	// acknowledgement).
	QoS int
	// Inflight is how many publishes may await their acknowledgement at
	// once (MQTT's receive maximum; concurrent requests in HTTP/3 request
	// mode). Zero means 1. With 1, a publisher on a 600 ms RTT link sends
	// fewer than two messages a second whatever the rate.
	Inflight int
}

// Config is one cell of the matrix: everything that identifies a run except
// the repeat index.
type Config struct {
	// Proto is "h3" or "mqtt".
	Proto string `json:"proto"`
	// Tuning is the tuning's name.
	Tuning string `json:"tuning"`
	// Profile is the link profile's name.
	Profile string `json:"profile"`
	// Payload is the payload size in bytes.
	Payload int `json:"payload"`
	// Mode is the publish mode: "request", "stream" or "mqtt".
	Mode string `json:"publish_mode"`
}

// Key is a stable, file-name-safe identifier of the configuration.
func (c Config) Key() string {
	r := strings.NewReplacer("/", "_", "=", "-", " ", "_", ".", "_")
	return fmt.Sprintf("%s-%s-%s-%s-%d", c.Proto, c.Mode, r.Replace(c.Tuning), c.Profile, c.Payload)
}

// Label is a short human name of the protocol and publish mode.
func (c Config) Label() string {
	if c.Proto == ProtoMQTT {
		return "MQTT/QUIC"
	}
	return "HTTP/3 " + c.Mode
}

// Job is one repeat of one configuration, with the tuning it uses.
type Job struct {
	Config
	// Repeat is the repeat index, from 1.
	Repeat int
	// Tuning is the full tuning the roles get.
	TuningSpec Tuning
}

// ID is a unique file-name-safe identifier of the run.
func (r Job) ID() string { return fmt.Sprintf("%s-r%d", r.Key(), r.Repeat) }

// Validate reports an unusable spec with a specific reason.
func (s *Spec) Validate() error {
	if len(s.Protos) == 0 {
		return errors.New("no protocols")
	}
	for _, p := range s.Protos {
		if p != ProtoH3 && p != ProtoMQTT {
			return fmt.Errorf("unknown protocol %q (want h3 or mqtt)", p)
		}
	}
	if slices.Contains(s.Protos, ProtoH3) {
		if len(s.Modes) == 0 {
			return errors.New("no HTTP/3 publish modes")
		}
		for _, m := range s.Modes {
			if m != ModeRequest && m != ModeStream {
				return fmt.Errorf("unknown publish mode %q (want request or stream)", m)
			}
		}
	}
	if len(s.Tunings) == 0 {
		return errors.New("no tunings")
	}
	seen := map[string]bool{}
	for _, t := range s.Tunings {
		if t.Name == "" {
			return errors.New("tuning without a name")
		}
		if seen[t.Name] {
			return fmt.Errorf("tuning %q listed twice", t.Name)
		}
		seen[t.Name] = true
	}
	if len(s.Profiles) == 0 {
		return errors.New("no link profiles")
	}
	if len(s.Payloads) == 0 {
		return errors.New("no payload sizes")
	}
	for _, p := range s.Payloads {
		if p < 1 || p > 256<<10 {
			return fmt.Errorf("payload size %d out of range 1..262144", p)
		}
	}
	if s.Repeat < 1 {
		return fmt.Errorf("repeat %d: want at least 1", s.Repeat)
	}
	if s.Count < 1 {
		return fmt.Errorf("count %d: want at least 1", s.Count)
	}
	if s.Rate < 0 {
		return fmt.Errorf("rate %v: want 0 (unpaced) or more", s.Rate)
	}
	if s.Inflight < 0 {
		return fmt.Errorf("inflight %d: want 1 or more", s.Inflight)
	}
	if s.QoS != 0 && s.QoS != 1 {
		return fmt.Errorf("qos %d: want 0 or 1", s.QoS)
	}
	return nil
}

// Configs lists the distinct configurations of the spec in matrix order.
func (s *Spec) Configs() []Config {
	var out []Config
	for _, prof := range s.Profiles {
		for _, t := range s.Tunings {
			for _, pl := range s.Payloads {
				for _, proto := range s.Protos {
					modes := []string{ModeMQTT}
					if proto == ProtoH3 {
						modes = s.Modes
					}
					for _, m := range modes {
						out = append(out, Config{Proto: proto, Tuning: t.Name, Profile: prof, Payload: pl, Mode: m})
					}
				}
			}
		}
	}
	return out
}

// Expand lists every run of the spec. Repeats are the outer loop, so an
// interrupted bench holds every configuration with fewer repeats rather
// than some configurations with all of them, and slow drift of the host
// spreads over all configurations alike.
func (s *Spec) Expand() []Job {
	tun := map[string]Tuning{}
	for _, t := range s.Tunings {
		tun[t.Name] = t
	}
	cfgs := s.Configs()
	out := make([]Job, 0, len(cfgs)*s.Repeat)
	for r := 1; r <= s.Repeat; r++ {
		for _, c := range cfgs {
			out = append(out, Job{Config: c, Repeat: r, TuningSpec: tun[c.Tuning]})
		}
	}
	return out
}

// ParseList splits a comma-separated flag value, dropping blanks.
func ParseList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseSizes parses a comma-separated list of byte sizes such as
// "16,256,1k".
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range ParseList(s) {
		mult := 1
		num := f
		switch {
		case strings.HasSuffix(strings.ToLower(f), "k"):
			mult, num = 1024, f[:len(f)-1]
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 1<<30 {
			return nil, fmt.Errorf("bad payload size %q (want a positive number of bytes, e.g. 256 or 1k)", f)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("empty payload size list")
	}
	return out, nil
}
