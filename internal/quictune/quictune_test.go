package quictune

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBuiltinsValid(t *testing.T) {
	for _, n := range Names() {
		p, err := Load(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if p.QUICConfig() == nil {
			t.Errorf("%s: nil config", n)
		}
	}
}

func TestLeanKeepAliveBelowIdle(t *testing.T) {
	c := Lean().QUICConfig()
	if c.KeepAlivePeriod == 0 || c.KeepAlivePeriod >= c.MaxIdleTimeout {
		t.Fatalf("keep-alive %v, idle %v", c.KeepAlivePeriod, c.MaxIdleTimeout)
	}
}

// TestZeroRTTByProfile: lean resumes with 0-RTT (with session resumption,
// which 0-RTT needs), a file can turn it off, and the default profile
// (quic-go's configuration) keeps it off.
// TestFirstFlightCopiesByProfile: on in lean, off in default, and a
// file can turn it off.
func TestFirstFlightCopiesByProfile(t *testing.T) {
	off, err := Parse([]byte("first_flight_copies = false\n"), "off.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		p    *Profile
		want bool
	}{
		{"lean", Lean(), true},
		{"lean, first_flight_copies = false", off, false},
		{"default", Default(), false},
	} {
		if tt.p.FirstFlightCopies != tt.want {
			t.Errorf("%s: FirstFlightCopies %v, want %v", tt.name, tt.p.FirstFlightCopies, tt.want)
		}
	}
}

func TestZeroRTTByProfile(t *testing.T) {
	off, err := Parse([]byte("allow_0rtt = false\n"), "off.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		p    *Profile
		want bool
	}{
		{"lean", Lean(), true},
		{"lean, allow_0rtt = false", off, false},
		{"default", Default(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.QUICConfig().Allow0RTT; got != tt.want {
				t.Errorf("Allow0RTT %v, want %v", got, tt.want)
			}
			if tt.want && !tt.p.SessionResumption {
				t.Error("0-RTT without session resumption")
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
		check             func(*Profile) bool
	}{
		{name: "override", in: `max_incoming_streams = 50
keep_alive_period = "10s"`, check: func(p *Profile) bool {
			return p.MaxIncomingStreams == 50 && time.Duration(p.KeepAlivePeriod) == 10*time.Second && p.InitialPacketSize == 1200
		}},
		{name: "base default", in: `base = "default"`, check: func(p *Profile) bool { return p.InitialPacketSize == 0 }},
		{name: "unknown key", in: `max_streams = 3`, wantErr: "unknown key"},
		{name: "bad duration", in: `keep_alive_period = "ten"`, wantErr: "invalid duration"},
		{name: "keepalive above idle", in: `keep_alive_period = "2m"`, wantErr: "must be below"},
		{name: "small packet", in: `initial_packet_size = 1000`, wantErr: "minimum"},
		{name: "bad base", in: `base = "fast"`, wantErr: "unknown base"},
		{name: "syntax", in: `= 3`, wantErr: "tuning profile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.in), "test.toml")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(p) {
				t.Errorf("unexpected profile %+v", p)
			}
		})
	}
}

func TestLoadFileAndMissing(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(f, []byte("max_idle_timeout = \"60s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(p.MaxIdleTimeout) != time.Minute {
		t.Errorf("idle = %v", p.MaxIdleTimeout)
	}
	if _, err := Load("nosuch"); err == nil || !strings.Contains(err.Error(), "unknown tuning profile") {
		t.Errorf("err = %v", err)
	}
}

func TestHandshakeRTTKnob(t *testing.T) {
	p, err := Parse([]byte("handshake_rtt = \"1.5s\"\n"), "t.toml")
	if err != nil || time.Duration(p.HandshakeRTT) != 1500*time.Millisecond {
		t.Fatalf("handshake_rtt: %v %v", p, err)
	}
	if _, err := Parse([]byte("handshake_rtt = \"-1s\"\n"), "t.toml"); err == nil {
		t.Fatal("negative handshake_rtt accepted")
	}
}
