package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Knob is one tuning knob of the study: what it is, lean's value, and the
// values tried instead.
type Knob struct {
	// ID names the knob in tuning names ("lean/ID=value").
	ID string
	// Title is the knob's human name.
	Title string
	// What explains what the knob does and why it might matter.
	What string
	// Lean is the lean profile's value, as text.
	Lean string
	// Variants are the values tried, one run set each.
	Variants []KnobValue
	// Recommend, when set, is the recommendation whatever the measured
	// effects (for a knob whose lean value is no option for a deployment,
	// such as running without authentication); the evidence is still given.
	Recommend string
	// Columns are extra columns of the knob's TUNING.md table: per-message
	// medians of role diagnostics that show where its effect goes.
	Columns []DiagColumn
}

// DiagColumn is one extra TUNING.md column: the median over repeats of a
// diagnostic divided by the messages sent.
type DiagColumn struct {
	// Head is the column heading.
	Head string
	// Key is the diagnostic's key in the run's Diag, e.g.
	// "pub.diag.trace.h3_header_bytes_sent".
	Key string
}

// KnobValue is one value of a knob and how to apply it.
type KnobValue struct {
	// Value is the value as text.
	Value string
	// TOML is the profile file content (on top of lean); may be empty when
	// Env does the work.
	TOML string
	// Env is extra role environment.
	Env []string
	// Auth is an ACL file for the broker (Tuning.Auth); PubArgs and
	// SubArgs are extra client flags (the token, --auth-every-request).
	Auth             string
	PubArgs, SubArgs []string
	// Extended marks a value left out of the default study (to keep it
	// near 15 minutes); --knobs all or naming the knob includes it.
	Extended bool
}

// StudyKnobs are the knobs of the tuning study, each varied alone from the
// lean profile.
func StudyKnobs() []Knob {
	return []Knob{
		{ID: "windows", Title: "Flow-control windows",
			What: "Initial and maximum stream and connection receive windows. Small windows bound memory on a 512 MB device; too small ones stall a sender on high bandwidth-delay links.",
			Lean: "stream 64 KiB (max 256 KiB), connection 128 KiB (max 512 KiB)",
			Variants: []KnobValue{
				{Value: "small", TOML: "initial_stream_receive_window = 16384\nmax_stream_receive_window = 65536\ninitial_connection_receive_window = 32768\nmax_connection_receive_window = 131072\n"},
				{Value: "quic-go", Extended: true, TOML: "initial_stream_receive_window = 524288\nmax_stream_receive_window = 6291456\ninitial_connection_receive_window = 786432\nmax_connection_receive_window = 15728640\n"},
			}},
		{ID: "max_incoming_streams", Title: "MaxIncomingStreams (MAX_STREAMS high-watermark)",
			What: "How many bidirectional streams the peer may open before it needs new credit in a MAX_STREAMS frame. HTTP/3 request mode opens one stream per message; a low limit means frequent MAX_STREAMS frames and, when credit runs out, waiting a round trip.",
			Lean: "1000",
			Variants: []KnobValue{
				{Value: "10", TOML: "max_incoming_streams = 10\n"},
				{Value: "100", Extended: true, TOML: "max_incoming_streams = 100\n"},
			}},
		{ID: "keep_alive", Title: "Keep-alive period",
			What: "PINGs sent when the connection is idle, so NAT bindings and the idle timer survive quiet periods. Costs a few datagrams per period while idle.",
			Lean: "25s",
			Variants: []KnobValue{
				{Value: "off", TOML: "keep_alive_period = \"0s\"\n"},
				{Value: "5s", Extended: true, TOML: "keep_alive_period = \"5s\"\n"},
			}},
		{ID: "idle_timeout", Title: "Idle timeout",
			What: "How long a silent connection lives. Too short on a sparse publisher means a new handshake (and TTFD) per burst; too long holds broker state for dead peers.",
			Lean: "90s",
			Variants: []KnobValue{
				{Value: "30s", Extended: true, TOML: "max_idle_timeout = \"30s\"\nkeep_alive_period = \"15s\"\n"},
			}},
		{ID: "handshake_timeout", Title: "Handshake idle timeout",
			What: "How long a handshake may go without progress. quic-go's 5 s default is short for multi-second RTTs with loss.",
			Lean: "20s",
			Variants: []KnobValue{
				{Value: "5s", TOML: "handshake_idle_timeout = \"5s\"\n"},
			}},
		{ID: "initial_packet_size", Title: "Initial packet size",
			What: "Size of the first datagrams before path MTU discovery. 1200 is safe on every path; larger values save packets on the handshake but are dropped where the path MTU is small (tunnels, NB-IoT).",
			Lean: "1200",
			Variants: []KnobValue{
				{Value: "1350", TOML: "initial_packet_size = 1350\n"},
			}},
		{ID: "pmtud", Title: "Path MTU discovery",
			What: "DPLPMTUD probes for bigger packets after the handshake. Probes cost bytes and, on lossy links, look like loss.",
			Lean: "off",
			Variants: []KnobValue{
				{Value: "on", TOML: "disable_path_mtu_discovery = false\n"},
			}},
		{ID: "cipher", Title: "Cipher suite",
			What: "TLS 1.3 AEAD. Go's crypto/tls picks the suite itself: AES-128-GCM where the CPU has AES instructions (this host), ChaCha20-Poly1305 where it has none (the Pi Zero). The variant runs every role with GODEBUG=cpu.aes=off, so crypto/tls sees no AES hardware and negotiates ChaCha20-Poly1305, as on a Pi Zero. Side effect: QUIC Initial packets (always AES-128-GCM) use software AES in that variant.",
			Lean: "AES-128-GCM (AES-NI)",
			Variants: []KnobValue{
				{Value: "chacha20", Env: []string{"GODEBUG=cpu.aes=off"}},
			}},
		{ID: "session_resumption", Title: "Session resumption (tickets)",
			What: "The server sends TLS session tickets so a reconnecting client can resume with a shorter handshake. Each run here makes one connection, so the effect measured is the tickets' cost; the benefit appears on reconnects.",
			Lean: "on",
			Variants: []KnobValue{
				{Value: "off", TOML: "session_resumption = false\n"},
			}},
		{ID: "0rtt", Title: "0-RTT",
			What:      "Lets a resumed client send its first request with the handshake. Each run makes one fresh connection, so 0-RTT cannot be used; the effect measured is enabling it (ticket extensions). Its benefit is on wake-ups: `quiot bench-reconnect` (docs/results/nbiot/README.md) measures a resumed wake-up at 1.04–1.10× the link's floor with 0-RTT and 1.9–2.1× without, on nbiot and ltem, over HTTP/3 and MQTT over QUIC. A replay of early data is harmless with quiot's clients and broker: the clients send only a QoS 1 publish with a message id in it (`Quiot-Msg-Id`, MQTT user property `quiot-msg-id`) and a send time; the broker (with 0-RTT allowed in its own tuning) publishes an id once per identity within 10 minutes, refuses early data whose send time is further than that from its clock, and answers anything else sent early with 425 (HTTP/3) or serves it only after the handshake, which a replay never completes (MQTT) (docs/pubsub.md, \"Message ids and 0-RTT\"; docs/mqtt.md, \"0-RTT\"). Against a broker without that dedup (EMQX, NanoMQ) a replayed publish is delivered again, which QoS 1 (at least once) allows; set `allow_0rtt = false` where duplicates are not acceptable.",
			Lean:      "on",
			Recommend: "on (lean): a warm wake-up pays no handshake round trip",
			Variants: []KnobValue{
				{Value: "off", TOML: "allow_0rtt = false\n"},
			}},
		{ID: "auth", Title: "Per-connection vs per-request authentication",
			What:      "A token (Authorization: Bearer) authenticates the HTTP/3 connection on its first request and the broker binds the identity to the connection (the default), or the token goes on every request (quiot pub --auth-every-request) and the broker checks it each time. quic-go's QPACK encoder uses no dynamic table, so a per-request header costs its full length on every message in request mode; in stream mode and MQTT the credentials travel once either way. Lean runs an open broker without credentials; both variants run the broker with an ACL file (one user allowed bench/#) and give both clients the token.",
			Lean:      "no authentication (open broker)",
			Recommend: "per-connection (the client's default; lean's open broker is no option outside a lab)",
			Columns: []DiagColumn{
				{Head: "pub HEADERS B/msg sent", Key: "pub.diag.trace.h3_header_bytes_sent"},
			},
			Variants: []KnobValue{
				{Value: "per-connection", Auth: benchACL, PubArgs: []string{"--token", benchToken}, SubArgs: []string{"--token", benchToken}},
				{Value: "per-request", Auth: benchACL, PubArgs: []string{"--token", benchToken, "--auth-every-request"}, SubArgs: []string{"--token", benchToken, "--auth-every-request"}},
			}},
	}
}

// benchToken is the bench user's token in the auth knob's variants: as long
// as a typical opaque token (43 characters, 256 bits base64url).
const benchToken = "qb3nch-7Kp2mX9vQ4rT8wY1zL6nB5cF0hJ3dG2sA7eU"

// benchACL is the auth knob's ACL file: one user with benchToken that may
// publish and subscribe under bench/, where every run's topic lies. The
// file holds the token's SHA-256 only, as `quiot token` writes it (a
// plain-text token would make the broker log a warning at every start).
const benchACL = `# quiot bench: the auth knob's ACL (one user, bench/# only)
[[user]]
name = "bench"
publish = ["bench/#"]
subscribe = ["bench/#"]

[[token]]
user = "bench"
sha256 = "df56fb7a05d19840f795ab0543f5e74f1b0f3b606ee92e765019b680b3020fae"  # SHA-256 of benchToken
`

// KnobTunings returns the lean profile and one tuning per knob value.
func KnobTunings(knobs []Knob) []Tuning {
	out := []Tuning{{Name: "lean", Profile: "lean"}}
	for _, k := range knobs {
		for _, v := range k.Variants {
			name := fmt.Sprintf("lean/%s=%s", k.ID, v.Value)
			t := Tuning{Name: name, Knob: k.ID, Value: v.Value, Profile: "lean", Env: v.Env,
				Auth: v.Auth, PubArgs: v.PubArgs, SubArgs: v.SubArgs}
			if v.TOML != "" {
				t.TOML = fmt.Sprintf("# %s: %s = %s, everything else lean\nbase = \"lean\"\n%s", name, k.Title, v.Value, v.TOML)
			}
			out = append(out, t)
		}
	}
	return out
}

// SelectKnobs filters knobs by ID with all their values; an empty list
// means the default study (every knob, values marked Extended left out,
// knobs left without values dropped); "all" means every knob and value.
func SelectKnobs(ids []string) ([]Knob, error) {
	all := StudyKnobs()
	if len(ids) == 1 && ids[0] == "all" {
		return all, nil
	}
	if len(ids) == 0 {
		var out []Knob
		for _, k := range all {
			var vs []KnobValue
			for _, v := range k.Variants {
				if !v.Extended {
					vs = append(vs, v)
				}
			}
			if len(vs) > 0 {
				k.Variants = vs
				out = append(out, k)
			}
		}
		return out, nil
	}
	var out []Knob
	for _, id := range ids {
		found := false
		for _, k := range all {
			if k.ID == id {
				out = append(out, k)
				found = true
			}
		}
		if !found {
			var known []string
			for _, k := range all {
				known = append(known, k.ID)
			}
			return nil, fmt.Errorf("unknown knob %q (want one of %s)", id, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// ResolveTunings turns --tunings names into tunings: "default", "lean", a
// study variant such as "lean/max_incoming_streams=10", or a TOML profile
// file (named by its path).
func ResolveTunings(names []string) ([]Tuning, error) {
	variants := map[string]Tuning{}
	for _, t := range KnobTunings(StudyKnobs()) {
		variants[t.Name] = t
	}
	var out []Tuning
	for _, n := range names {
		switch {
		case n == "default" || n == "lean":
			out = append(out, Tuning{Name: n, Profile: n})
		case variants[n].Name != "":
			out = append(out, variants[n])
		case strings.HasPrefix(n, "lean/"):
			return nil, fmt.Errorf("unknown tuning variant %q", n)
		default:
			if _, err := os.Stat(n); err != nil {
				return nil, fmt.Errorf("unknown tuning %q (want default, lean, a study variant like lean/max_incoming_streams=10, or a TOML file)", n)
			}
			abs, err := filepath.Abs(n)
			if err != nil {
				return nil, fmt.Errorf("tuning file %s: %w", n, err)
			}
			out = append(out, Tuning{Name: strings.TrimSuffix(filepath.Base(n), ".toml"), Profile: abs})
		}
	}
	return out, nil
}
