package bridge_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
)

func TestParseFull(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	ca := filepath.Join(dir, "ca.pem")
	for _, f := range []string{pw, ca} {
		if err := os.WriteFile(f, []byte("from-file\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := bridge.Parse([]byte(`
[broker]
listen = ":4433"

[[bridge]]
name          = "cloud"
url           = "mqtts://cloud.example:8883"
out           = ["sensors/#"]
in            = ["cmd/#"]
remote_prefix = "site-1/"
qos           = 1
username      = "edge"
password_file = "` + pw + `"
ca_file       = "` + ca + `"
mqtt_version  = "5"
keepalive     = "30s"
clean_start   = false
reconnect_min = "2s"
reconnect_max = "5m"
identity      = "cloud"
queue_messages = 100
queue_bytes   = 65536
store_dir     = "/var/lib/quiot/bridge-cloud"
store_max_bytes = 1048576
store_max_age = "24h"
down_alert    = "90s"
max_inflight  = 32

[[bridge]]
name = "second"
url  = "mqtt://127.0.0.1"
out  = "a/#"
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("%d bridges", len(cs))
	}
	c := cs[0]
	if c.Name != "cloud" || c.Password != "from-file" || c.CleanStart || c.SessionExpiry != bridge.DefaultSessionExpiry ||
		c.KeepAlive != 30*time.Second || c.ReconnectMax != 5*time.Minute || c.QueueMessages != 100 || c.QueueBytes != 65536 ||
		c.ClientID != "quiot-bridge-cloud" || c.RemotePrefix != "site-1/" || c.Identity != "cloud" ||
		c.StoreDir != "/var/lib/quiot/bridge-cloud" || c.StoreMaxBytes != 1<<20 || c.StoreMaxAge != 24*time.Hour ||
		c.DownAlert != 90*time.Second || c.MaxInflight != 32 {
		t.Fatalf("parsed %+v", c)
	}
	d := cs[1]
	if d.QoS != 1 || !d.CleanStart || d.SessionExpiry != 0 || len(d.Out) != 1 || d.Out[0] != "a/#" || d.QueueMessages != bridge.DefaultQueueMessages ||
		d.DownAlert != bridge.DefaultDownAlert || d.Tuning != "lean" || d.MaxInflight != bridge.DefaultMaxInflight {
		t.Fatalf("defaults %+v", d)
	}
}

// TestParseErrors: each configuration error names the bridge and the key.
func TestParseErrors(t *testing.T) {
	const ok = "url = \"mqtt://h\"\nout = [\"a/#\"]\n"
	for _, tc := range []struct {
		name, table, bridge, key, says string
	}{
		{"no name", ok, "#1", "name", "required"},
		{"bad name", "name = \"a b\"\n" + ok, `"a b"`, "name", "only letters"},
		{"no url", "name = \"x\"\nout = [\"a\"]\n", `"x"`, "url", "required"},
		{"bad scheme", "name = \"x\"\nurl = \"http://h\"\nout = [\"a\"]\n", `"x"`, "url", "want mqtt://"},
		{"https mqtt version", "name = \"x\"\nurl = \"https://h\"\nout = [\"a\"]\nmqtt_version = 3\n", `"x"`, "mqtt_version", "not MQTT"},
		{"down_alert 0", "name = \"x\"\n" + ok + "down_alert = \"0s\"\n", `"x"`, "down_alert", "must be positive"},
		{"unknown tuning", "name = \"x\"\nurl = \"mqtt-quic://h\"\nout = [\"a\"]\ntuning = \"fast\"\n", `"x"`, "tuning", "unknown tuning profile"},
		{"no filters", "name = \"x\"\nurl = \"mqtt://h\"\n", `"x"`, "out", "needs out or in"},
		{"bad filter", "name = \"x\"\nurl = \"mqtt://h\"\nout = [\"a/#/b\"]\n", `"x"`, "out", "a/#/b"},
		{"filter 17 levels", "name = \"x\"\nurl = \"mqtt://h\"\nin = [\"" + strings.Repeat("a/", 16) + "#\"]\n", `"x"`, "in", "17 levels, more than 16"},
		{"filter 257 bytes", "name = \"x\"\nurl = \"mqtt://h\"\nout = [\"" + strings.Repeat("x", 257) + "\"]\n", `"x"`, "out", "257 bytes, longer than 256"},
		{"prefix beyond the limits", "name = \"x\"\nurl = \"mqtt://h\"\nin = [\"" + strings.Repeat("a/", 15) + "#\"]\nremote_prefix = \"site-1/\"\n", `"x"`, "remote_prefix", "17 levels, more than 16"},
		{"dollar filter", "name = \"x\"\nurl = \"mqtt://h\"\nin = [\"$SYS/#\"]\n", `"x"`, "in", "$ topics never cross"},
		{"typo", "name = \"x\"\n" + ok + "remote_prefx = \"p/\"\n", `"x"`, "remote_prefx", "did you mean remote_prefix"},
		{"unknown", "name = \"x\"\n" + ok + "colour = 1\n", `"x"`, "colour", "unknown key"},
		{"qos 2", "name = \"x\"\n" + ok + "qos = 2\n", `"x"`, "qos", "want 0 or 1"},
		{"qos string", "name = \"x\"\n" + ok + "qos = \"1\"\n", `"x"`, "qos", "want an integer"},
		{"mqtt 3.1", "name = \"x\"\n" + ok + "mqtt_version = \"3.1\"\n", `"x"`, "mqtt_version", "not supported"},
		{"mqtt 4.0", "name = \"x\"\n" + ok + "mqtt_version = \"4.0\"\n", `"x"`, "mqtt_version", "want \"5\" or \"3.1.1\""},
		{"keepalive", "name = \"x\"\n" + ok + "keepalive = \"soon\"\n", `"x"`, "keepalive", "invalid duration"},
		{"keepalive 0", "name = \"x\"\n" + ok + "keepalive = \"0s\"\n", `"x"`, "keepalive", "want 1s"},
		{"backoff", "name = \"x\"\n" + ok + "reconnect_min = \"10s\"\nreconnect_max = \"1s\"\n", `"x"`, "reconnect_max", "below reconnect_min"},
		{"password twice", "name = \"x\"\n" + ok + "password = \"a\"\npassword_file = \"/nonexistent\"\n", `"x"`, "password_file", "not both"},
		{"password file", "name = \"x\"\n" + ok + "password_file = \"/nonexistent/pw\"\n", `"x"`, "password_file", "no such file"},
		{"cert without key", "name = \"x\"\nurl = \"mqtts://h\"\nout = [\"a\"]\ncert_file = \"/c\"\n", `"x"`, "cert_file", "go together"},
		{"tls on mqtt", "name = \"x\"\n" + ok + "ca_file = \"/c\"\n", `"x"`, "ca_file", "mqtts://"},
		{"ca missing", "name = \"x\"\nurl = \"mqtts://h\"\nout = [\"a\"]\nca_file = \"/nonexistent/ca\"\n", `"x"`, "ca_file", "no such file"},
		{"prefix wildcard", "name = \"x\"\n" + ok + "remote_prefix = \"+/\"\n", `"x"`, "remote_prefix", ""},
		{"identity", "name = \"x\"\n" + ok + "identity = \"a/b\"\n", `"x"`, "identity", ""},
		{"queue", "name = \"x\"\n" + ok + "queue_messages = 0\n", `"x"`, "queue_messages", "at least 1"},
		{"max_inflight 0", "name = \"x\"\n" + ok + "max_inflight = 0\n", `"x"`, "max_inflight", "want 1 to 65535"},
		{"max_inflight big", "name = \"x\"\n" + ok + "max_inflight = 70000\n", `"x"`, "max_inflight", "want 1 to 65535"},
		{"store age", "name = \"x\"\n" + ok + "store_max_age = \"-1h\"\n", `"x"`, "store_max_age", "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.Parse([]byte("[[bridge]]\n" + tc.table))
			var be *bridge.Error
			if !errors.As(err, &be) {
				t.Fatalf("Parse = %v, want a *bridge.Error", err)
			}
			msg := err.Error()
			if be.Bridge != tc.bridge || be.Key != tc.key || !strings.Contains(msg, tc.says) {
				t.Fatalf("error %q (bridge %s, key %q), want bridge %s, key %q, saying %q", msg, be.Bridge, be.Key, tc.bridge, tc.key, tc.says)
			}
		})
	}
	_, err := bridge.Parse([]byte("[[bridge]]\nname = \"x\"\nurl = \"mqtt://h\"\nout = [\"a\"]\n[[bridge]]\nname = \"x\"\nurl = \"mqtt://h\"\nout = [\"a\"]\n"))
	if err == nil || !strings.Contains(err.Error(), "two bridges") {
		t.Fatalf("duplicate names: %v", err)
	}
	for _, v := range []string{`"3.1.1"`, "3", "4", `"4"`} {
		cs, err := bridge.Parse([]byte("[[bridge]]\nname = \"x\"\nurl = \"mqtt://h\"\nout = [\"a\"]\nmqtt_version = " + v + "\n"))
		if err != nil || cs[0].MQTTVersion != "3.1.1" {
			t.Errorf("mqtt_version = %s: %v %+v, want 3.1.1", v, err, cs)
		}
	}
	if cs, err := bridge.Parse([]byte("[[bridge]]\nname = \"x\"\nurl = \"https://h\"\nout = [\"a\"]\n")); err != nil || cs[0].URL != "https://h" {
		t.Errorf("https:// upstream: %v %+v", err, cs)
	}
	if cs, err := bridge.Parse([]byte("[broker]\nlisten = \":1\"\n")); err != nil || cs != nil {
		t.Fatalf("no bridges: %v %v", cs, err)
	}
}
