package mqttquic

import (
	"fmt"
	"testing"
)

// startPaths starts startSecure's broker with every MQTT listener
// (QUIC, TCP, TLS, ws, wss and WebSocket on the broker's port) on
// loopback.
func startPaths(t *testing.T, mod func(*Options)) *bridged {
	t.Helper()
	b, _ := startSecure(t, aclFile, func(o *Options) {
		o.WSAddr = "127.0.0.1:0"
		o.WSSAddr = "127.0.0.1:0"
		o.WSOnBroker = true
		if mod != nil {
			mod(o)
		}
	})
	return b
}

// TestLimitsEveryTransport: the client and session bounds
// (TestLimitClients, TestLimitSessions, TestAnonymousSessionsPerAddress
// over MQTT/TCP) hold on every other MQTT path alike: the client beyond
// MaxClients, the session beyond an identity's MaxSessionsPerIdentity
// (anonymous clients counted per source address) and beyond MaxSessions
// are refused with Quota exceeded (3.1.1: Server unavailable) and
// counted (docs/security.md, Bounds).
func TestLimitsEveryTransport(t *testing.T) {
	for _, tr := range []string{"quic", "tls", "ws", "wss", "broker"} {
		t.Run(tr, func(t *testing.T) {
			t.Run("clients", func(t *testing.T) {
				b := startPaths(t, func(o *Options) { o.Limits.MaxClients = 2 })
				dial := func(v byte, id string, local string) byte {
					_, code := pathConnect(t, b.mqtt, b.h3.Broker, b.pki, tr, pathOpts{local: local}, connectOpts{version: v, id: id, clean: true})
					return code
				}
				for i := range 2 {
					if code := dial(5, fmt.Sprint("c", i), ""); code != 0 {
						t.Fatalf("client %d: 0x%02x", i, code)
					}
				}
				for _, v := range []byte{5, 4} {
					if code := dial(v, fmt.Sprint("c3-", v), "127.0.0.2"); code != quotaExceeded(v) {
						t.Errorf("v%d: third client: 0x%02x, want 0x%02x", v, code, quotaExceeded(v))
					}
				}
				if st := b.mqtt.Security(); st.RefusedClients != 2 || st.Clients != 2 {
					t.Errorf("RefusedClients = %d, Clients = %d, want 2, 2", st.RefusedClients, st.Clients)
				}
			})
			t.Run("sessions", func(t *testing.T) {
				b := startPaths(t, func(o *Options) {
					o.Limits.MaxSessionsPerIdentity = 2
					o.Limits.MaxSessions = 5
				})
				dial := func(id, user, local string) byte {
					o := connectOpts{id: id, clean: true}
					if user != "" {
						o.user, o.pass = user, "tok-"+user
					}
					_, code := pathConnect(t, b.mqtt, b.h3.Broker, b.pki, tr, pathOpts{local: local}, o)
					return code
				}
				for _, c := range []struct {
					id, user, local string
					want            byte
					why             string
				}{
					{"alice-1", "alice", "127.0.0.1", 0, ""},
					{"alice-2", "alice", "127.0.0.2", 0, ""},
					{"alice-3", "alice", "127.0.0.3", 0x97, "a third session of alice"},
					{"a1", "", "127.0.0.1", 0, ""},
					{"a2", "", "127.0.0.1", 0, ""},
					{"a3", "", "127.0.0.1", 0x97, "a third anonymous session from 127.0.0.1"},
					{"b1", "", "127.0.0.2", 0, "another address's anonymous sessions are its own"},
					{"b2", "", "127.0.0.2", 0x97, "a sixth session (MaxSessions 5)"},
				} {
					if code := dial(c.id, c.user, c.local); code != c.want {
						t.Errorf("%s from %s: 0x%02x, want 0x%02x (%s)", c.id, c.local, code, c.want, c.why)
					}
				}
				if st := b.mqtt.Security(); st.RefusedSessions != 3 || st.Sessions != 5 {
					t.Errorf("RefusedSessions = %d, Sessions = %d, want 3, 5", st.RefusedSessions, st.Sessions)
				}
			})
		})
	}
}
