package bridge

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/topic"
)

// Defaults of a [[bridge]] table (docs/bridge.md).
const (
	DefaultKeepAlive     = 60 * time.Second
	DefaultSessionExpiry = time.Hour
	DefaultReconnectMin  = time.Second
	DefaultReconnectMax  = time.Minute
	DefaultQueueMessages = 10000
	DefaultQueueBytes    = 16 << 20
	DefaultDownAlert     = 5 * time.Minute
	DefaultMaxInflight   = 16
)

// Config is one bridge: a [[bridge]] table of the broker's configuration
// file (docs/bridge.md describes every key).
type Config struct {
	// Name names the bridge in logs, errors and the origin of the
	// messages it brings in ("bridge:NAME").
	Name string
	// URL is the upstream broker: mqtt://host[:1883], mqtts://host[:8883],
	// mqtt-quic://host[:14567] (MQTT over QUIC, as quiot, EMQX and NanoMQ
	// speak it) or https://host[:4433] (another quiot over HTTP/3).
	URL string
	// Out are the local filters whose messages are forwarded up.
	Out []string
	// In are the filters (without RemotePrefix) subscribed to upstream and
	// brought down.
	In []string
	// RemotePrefix is prepended to topics going up and to In's filters, and
	// stripped from topics coming down.
	RemotePrefix string
	// QoS is the QoS of the publishes up and of the remote subscriptions
	// (0 or 1).
	QoS byte
	// Username and Password authenticate to the upstream (Password may come
	// from PasswordFile).
	Username, Password string
	// ClientID is the MQTT client identifier; default "quiot-bridge-NAME".
	ClientID string
	// CAFile verifies the upstream's certificate (mqtts://); empty means
	// the system pool.
	CAFile string
	// CertFile and KeyFile are a client certificate for mutual TLS.
	CertFile, KeyFile string
	// Tuning names the QUIC tuning profile of an mqtt-quic:// upstream
	// (internal/quictune: "lean", "default" or a TOML file); default lean.
	Tuning string
	// MQTTVersion is "5" or "3.1.1" (also written 3 or 4); an https://
	// upstream speaks no MQTT.
	MQTTVersion string
	// KeepAlive is the MQTT keep-alive.
	KeepAlive time.Duration
	// CleanStart starts a new remote session on the first connection;
	// false keeps the remote session (subscriptions, queued messages) for
	// SessionExpiry across disconnects.
	CleanStart bool
	// SessionExpiry is how long the upstream keeps the session after a
	// disconnect (0 with CleanStart: none).
	SessionExpiry time.Duration
	// ReconnectMin and ReconnectMax bound the reconnect backoff
	// (exponential with jitter).
	ReconnectMin, ReconnectMax time.Duration
	// Identity is the local identity inbound messages are published under:
	// the ACL must allow it to publish each topic ("" is the anonymous
	// rules).
	Identity string
	// QueueMessages and QueueBytes bound the messages waiting to go up;
	// beyond them the oldest is dropped and counted.
	QueueMessages int
	QueueBytes    int64
	// MaxInflight is how many QoS 1 publishes may await their PUBACK at
	// once (in order on the wire; fewer when the upstream's Receive
	// Maximum is lower). An https:// upstream gets one at a time.
	MaxInflight int
	// StoreDir, when set, is a directory (one per bridge) where messages
	// waiting to go up are kept on disk (internal/spool's log): they survive
	// a restart of the broker, and a QoS 1 or 2 publisher is acknowledged
	// only once its message is in it. Empty: memory only.
	StoreDir string
	// StoreMaxBytes and StoreMaxAge bound the store (0: 64 MiB, 7 days);
	// beyond them the oldest messages are dropped and counted.
	StoreMaxBytes int64
	StoreMaxAge   time.Duration
	// DownAlert is how long the bridge may be without an upstream
	// connection before /healthz reports the broker degraded.
	DownAlert time.Duration
}

// Error is a configuration error of one bridge: it names the bridge (or
// its position when it has no name yet) and the key.
type Error struct {
	Bridge string // name, or "#N" (1-based) before the name is known
	Key    string
	Err    error
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("[[bridge]] %s: %v", e.Bridge, e.Err)
	}
	return fmt.Sprintf("[[bridge]] %s: key %q: %v", e.Bridge, e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// LoadFile reads the [[bridge]] tables of the configuration file at path
// (other tables are not looked at).
func LoadFile(path string) ([]Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bridge configuration: %w", err)
	}
	return Parse(data)
}

// Parse decodes and checks the [[bridge]] tables of a configuration file.
// Unknown keys, bad values, missing required keys and duplicate names are
// errors (*Error) naming the bridge and the key. Files named by a table
// (password_file) are read here.
func Parse(data []byte) ([]Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, fmt.Errorf("bridge configuration: %w", err)
	}
	v, ok := raw["bridge"]
	if !ok {
		return nil, nil
	}
	tables, ok := v.([]map[string]any)
	if !ok {
		return nil, &Error{Bridge: "", Err: errors.New("bridge must be an array of tables: write [[bridge]]")}
	}
	var out []Config
	seen := map[string]bool{}
	for i, t := range tables {
		c, err := parseOne(i, t)
		if err != nil {
			return nil, err
		}
		if seen[c.Name] {
			return nil, &Error{Bridge: strconv.Quote(c.Name), Key: "name", Err: errors.New("two bridges have this name")}
		}
		seen[c.Name] = true
		out = append(out, c)
	}
	return out, nil
}

var keys = []string{"name", "url", "out", "in", "remote_prefix", "qos", "username", "password", "password_file",
	"client_id", "ca_file", "cert_file", "key_file", "mqtt_version", "keepalive", "clean_start", "session_expiry",
	"reconnect_min", "reconnect_max", "identity", "queue_messages", "queue_bytes", "store_dir", "store_max_bytes", "store_max_age", "tuning", "down_alert", "max_inflight"}

func parseOne(i int, t map[string]any) (Config, error) {
	c := Config{
		QoS: 1, MQTTVersion: "5", Tuning: "lean", KeepAlive: DefaultKeepAlive, CleanStart: true,
		ReconnectMin: DefaultReconnectMin, ReconnectMax: DefaultReconnectMax,
		QueueMessages: DefaultQueueMessages, QueueBytes: DefaultQueueBytes,
		DownAlert: DefaultDownAlert, MaxInflight: DefaultMaxInflight,
	}
	who := fmt.Sprintf("#%d", i+1)
	if n, ok := t["name"].(string); ok && n != "" {
		who = strconv.Quote(n)
	}
	fail := func(key string, format string, args ...any) error {
		return &Error{Bridge: who, Key: key, Err: fmt.Errorf(format, args...)}
	}
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	slices.Sort(names)
	var sessionSet bool
	var passwordFile string
	for _, k := range names {
		v := t[k]
		var err error
		switch k {
		case "name":
			c.Name, err = str(v)
		case "url":
			c.URL, err = str(v)
		case "out":
			c.Out, err = strs(v)
		case "in":
			c.In, err = strs(v)
		case "remote_prefix":
			c.RemotePrefix, err = str(v)
		case "qos":
			var n int64
			if n, err = integer(v); err == nil {
				if n != 0 && n != 1 {
					return c, fail(k, "qos %d: want 0 or 1", n)
				}
				c.QoS = byte(n)
			}
		case "username":
			c.Username, err = str(v)
		case "password":
			c.Password, err = str(v)
		case "password_file":
			passwordFile, err = str(v)
		case "client_id":
			c.ClientID, err = str(v)
		case "ca_file":
			c.CAFile, err = str(v)
		case "cert_file":
			c.CertFile, err = str(v)
		case "key_file":
			c.KeyFile, err = str(v)
		case "mqtt_version":
			switch x := v.(type) {
			case string:
				c.MQTTVersion = x
			case int64:
				c.MQTTVersion = strconv.FormatInt(x, 10)
			case float64:
				c.MQTTVersion = strconv.FormatFloat(x, 'f', -1, 64)
			default:
				err = fmt.Errorf("want a string (\"5\"), got %T", v)
			}
		case "keepalive":
			c.KeepAlive, err = duration(v)
		case "clean_start":
			c.CleanStart, err = boolean(v)
		case "session_expiry":
			c.SessionExpiry, err = duration(v)
			sessionSet = true
		case "reconnect_min":
			c.ReconnectMin, err = duration(v)
		case "reconnect_max":
			c.ReconnectMax, err = duration(v)
		case "identity":
			c.Identity, err = str(v)
		case "queue_messages":
			var n int64
			if n, err = integer(v); err == nil {
				if n < 1 {
					return c, fail(k, "must be at least 1")
				}
				c.QueueMessages = int(n)
			}
		case "queue_bytes":
			var n int64
			if n, err = integer(v); err == nil {
				if n < 1 {
					return c, fail(k, "must be at least 1")
				}
				c.QueueBytes = n
			}
		case "max_inflight":
			var n int64
			if n, err = integer(v); err == nil {
				if n < 1 || n > 65535 {
					return c, fail(k, "%d: want 1 to 65535", n)
				}
				c.MaxInflight = int(n)
			}
		case "store_dir":
			c.StoreDir, err = str(v)
		case "tuning":
			c.Tuning, err = str(v)
		case "down_alert":
			c.DownAlert, err = duration(v)
			if err == nil && c.DownAlert <= 0 {
				return c, fail(k, "must be positive")
			}
		case "store_max_bytes":
			var n int64
			if n, err = integer(v); err == nil {
				if n < 1 {
					return c, fail(k, "must be at least 1")
				}
				c.StoreMaxBytes = n
			}
		case "store_max_age":
			c.StoreMaxAge, err = duration(v)
			if err == nil && c.StoreMaxAge <= 0 {
				return c, fail(k, "must be positive")
			}
		default:
			if s := closest(k); s != "" {
				return c, fail(k, "unknown key (did you mean %s?)", s)
			}
			return c, fail(k, "unknown key (known: %s)", strings.Join(keys, ", "))
		}
		if err != nil {
			return c, fail(k, "%v", err)
		}
	}
	if !sessionSet && !c.CleanStart {
		c.SessionExpiry = DefaultSessionExpiry
	}
	if passwordFile != "" {
		if c.Password != "" {
			return c, fail("password_file", "give password or password_file, not both")
		}
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return c, fail("password_file", "%v", err)
		}
		c.Password = strings.TrimRight(string(b), "\r\n")
	}
	if err := c.check(fail); err != nil {
		return c, err
	}
	return c, nil
}

// check validates what each key's type cannot.
func (c *Config) check(fail func(key, format string, args ...any) error) error {
	if c.Name == "" {
		return fail("name", "required (one topic level: letters, digits, '-', '_', '.')")
	}
	for _, r := range c.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fail("name", "%q: only letters, digits, '-', '_' and '.'", c.Name)
		}
	}
	if c.URL == "" {
		return fail("url", "required (mqtt://host:1883, mqtts://host:8883, mqtt-quic://host:14567 or https://host:4433)")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fail("url", "%v", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "mqtts", "mqtt-quic", "https":
	default:
		return fail("url", "scheme %q: want mqtt://, mqtts://, mqtt-quic:// or https://", u.Scheme)
	}
	if u.Hostname() == "" {
		return fail("url", "%q has no host", c.URL)
	}
	if len(c.Out) == 0 && len(c.In) == 0 {
		return fail("out", "a bridge needs out or in filters (or both)")
	}
	for _, key := range []string{"out", "in"} {
		fs := c.Out
		if key == "in" {
			fs = c.In
		}
		for _, f := range fs {
			if err := topic.ValidateFilter(f); err != nil {
				return fail(key, "filter %q: %v", f, err)
			}
			if strings.HasPrefix(f, "$") {
				return fail(key, "filter %q: $ topics never cross a bridge", f)
			}
			if err := topic.ValidateFilter(c.RemotePrefix + f); err != nil {
				return fail("remote_prefix", "%q before filter %q: %v", c.RemotePrefix, f, err)
			}
		}
	}
	if c.RemotePrefix != "" {
		if strings.ContainsAny(c.RemotePrefix, "+#") || strings.HasPrefix(c.RemotePrefix, "$") || strings.ContainsRune(c.RemotePrefix, 0) {
			return fail("remote_prefix", "%q: no wildcards, NUL or leading $", c.RemotePrefix)
		}
	}
	switch c.MQTTVersion {
	case "5", "5.0":
		c.MQTTVersion = "5"
	case "3.1.1", "4", "3":
		c.MQTTVersion = "3.1.1"
	case "3.1":
		return fail("mqtt_version", "%q (MQTT 3.1, protocol level 3) is not supported: \"3.1.1\" or \"5\"", c.MQTTVersion)
	default:
		return fail("mqtt_version", "%q: want \"5\" or \"3.1.1\"", c.MQTTVersion)
	}
	if c.MQTTVersion == "3.1.1" && strings.EqualFold(u.Scheme, "https") {
		return fail("mqtt_version", "an https:// upstream speaks quiot's HTTP/3 protocol, not MQTT: leave mqtt_version out")
	}
	if _, err := quictune.Load(c.Tuning); err != nil {
		return fail("tuning", "%v", err)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fail("cert_file", "cert_file and key_file go together")
	}
	if strings.EqualFold(u.Scheme, "mqtt") && (c.CAFile != "" || c.CertFile != "") {
		return fail("ca_file", "ca_file, cert_file and key_file need an mqtts://, mqtt-quic:// or https:// url")
	}
	for _, f := range []struct{ key, path string }{{"ca_file", c.CAFile}, {"cert_file", c.CertFile}, {"key_file", c.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fail(f.key, "%v", err)
		}
	}
	if c.KeepAlive < time.Second || c.KeepAlive > 65535*time.Second {
		return fail("keepalive", "%v: want 1s to 18h12m15s", c.KeepAlive)
	}
	if c.SessionExpiry < 0 || c.SessionExpiry > (1<<32-1)*time.Second {
		return fail("session_expiry", "%v out of range", c.SessionExpiry)
	}
	if c.ReconnectMin <= 0 {
		return fail("reconnect_min", "must be positive")
	}
	if c.ReconnectMax < c.ReconnectMin {
		return fail("reconnect_max", "%v is below reconnect_min %v", c.ReconnectMax, c.ReconnectMin)
	}
	if c.Identity != "" {
		if err := auth.ValidIdentity(c.Identity); err != nil {
			return fail("identity", "%v", err)
		}
	}
	if c.ClientID == "" {
		c.ClientID = "quiot-bridge-" + c.Name
	}
	return nil
}

func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", v)
	}
	return s, nil
}

func strs(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("want an array of strings, got a %T in it", e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want an array of strings, got %T", v)
}

func integer(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("want an integer, got %T", v)
	}
	return n, nil
}

func boolean(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("want true or false, got %T", v)
	}
	return b, nil
}

func duration(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("want a duration string such as \"30s\", got %T", v)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	return d, nil
}

// closest returns the known key nearest to k (a typo), or "".
func closest(k string) string {
	best, bestD := "", 3
	for _, c := range keys {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
