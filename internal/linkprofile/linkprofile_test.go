package linkprofile

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite scripts/netem/netem.sh")

func TestBuiltinProfiles(t *testing.T) {
	set := Default()
	want := []string{"lan", "wifi", "ltem", "nbiot", "lossy", "sat"}
	if got := set.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, p := range set.All() {
		t.Run(p.Name, func(t *testing.T) {
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			if p.Description == "" {
				t.Error("no description")
			}
			for _, d := range []netimpair.Direction{p.Up, p.Down} {
				if d.RateKbit <= 0 || d.QueueLimit <= 0 || d.Delay <= 0 {
					t.Errorf("direction %+v: want a rate, a queue limit and a delay", d)
				}
				if d.Jitter > d.Delay {
					t.Errorf("jitter %v above delay %v", d.Jitter, d.Delay)
				}
			}
		})
	}
	// The characteristics the design asks for.
	checks := []struct {
		name string
		ok   func(Profile) bool
		what string
	}{
		{"nbiot", func(p Profile) bool { return p.Up.Delay >= 100*time.Millisecond && p.Up.RateKbit < 100 }, "hundreds of ms, tens of kbit/s"},
		{"lossy", func(p Profile) bool {
			l := p.Up.MeanLossPct()
			return l >= 5 && l <= 20
		}, "5-20 % loss"},
		{"sat", func(p Profile) bool { return p.RTT() >= 478*time.Millisecond }, "GEO RTT >= 478 ms"},
		{"lan", func(p Profile) bool { return p.RTT() < time.Millisecond && p.Up.LossPct == 0 }, "sub-ms, lossless"},
		{"ltem", func(p Profile) bool { return p.Up.RateKbit != p.Down.RateKbit }, "per-direction rates"},
	}
	for _, c := range checks {
		p, err := set.Get(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if !c.ok(p) {
			t.Errorf("%s: want %s, got %+v", c.name, c.what, p)
		}
	}
	if _, err := Get("nope"); err == nil || !strings.Contains(err.Error(), "lan") {
		t.Errorf("Get(nope) = %v, want an error listing the known profiles", err)
	}
	if n := Names(); len(n) != 6 {
		t.Errorf("Names() = %v", n)
	}
	if !bytes.Equal(Builtin(), profilesTOML) {
		t.Error("Builtin() differs from the embedded file")
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"empty", "", "no profiles"},
		{"bad toml", "[x\n", "parse link profiles"},
		{"unknown key", "[x]\ndelay = \"1ms\"\ncolour = 1\n", "unknown keys: x.colour"},
		{"bad duration", "[x]\ndelay = \"fast\"\n", "parse link profiles"},
		{"negative loss", "[x]\nloss_pct = -1\n", "profile x: up: loss"},
		{"bad burst", "[x]\nburst = { p = 5 }\n", "gilbert-elliott r = 0"},
		{"bad down", "[x]\n[x.down]\nrate_kbit = -5\n", "profile x: down: rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in), "test.toml")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	s, err := Parse([]byte("[b]\ndelay = \"10ms\"\nrate_kbit = 100\n[b.up]\nrate_kbit = 50\nreorder = true\n[a]\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("names in file order: %v", got)
	}
	b, _ := s.Get("b")
	if b.Up.RateKbit != 50 || b.Down.RateKbit != 100 || b.Up.Delay != 10*time.Millisecond || b.Down.Delay != 10*time.Millisecond || !b.Up.Reorder || b.Down.Reorder {
		t.Errorf("override: %+v", b)
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(path, []byte("[mine]\ndelay = \"5ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Get("mine"); err != nil || p.RTT() != 10*time.Millisecond {
		t.Errorf("Get(mine) = %+v, %v", p, err)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("LoadFile of a missing file: no error")
	}
}

func TestNetemArgs(t *testing.T) {
	tests := []struct {
		name string
		d    netimpair.Direction
		want string
	}{
		{"nothing", netimpair.Direction{}, "limit 2000"},
		{"delay", netimpair.Direction{Delay: 300 * time.Millisecond}, "delay 300ms limit 2000"},
		{"delay us jitter", netimpair.Direction{Delay: 250 * time.Microsecond, Jitter: 50 * time.Microsecond}, "delay 250us 50us limit 2000"},
		{"random loss", netimpair.Direction{LossPct: 0.3}, "loss random 0.3% limit 2000"},
		{"gemodel", netimpair.Direction{Burst: netimpair.GilbertElliott{P: 1, R: 20}}, "loss gemodel 1% 20% 100% 0% limit 2000"},
		{"gemodel folded with random", netimpair.Direction{LossPct: 5, Burst: netimpair.GilbertElliott{P: 1, R: 20, LossBad: 50, LossGood: 1}},
			"loss gemodel 1% 20% 52.5% 5.95% limit 2000"},
		{"rate", netimpair.Direction{RateKbit: 20, QueueLimit: 20}, "rate 20kbit limit 20"},
		{"fractional rate", netimpair.Direction{RateKbit: 12.5, QueueLimit: 10}, "rate 12500bit limit 10"},
		{"rate with delay sizes limit", netimpair.Direction{Delay: 100 * time.Millisecond, RateKbit: 1024, QueueLimit: 10},
			"delay 100ms rate 1024kbit limit 210"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NetemArgs(tt.d); got != tt.want {
				t.Errorf("NetemArgs() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestApplyCommands(t *testing.T) {
	nbiot, err := Get("nbiot")
	if err != nil {
		t.Fatal(err)
	}
	common := []string{
		"modprobe sch_netem 2>/dev/null || true",
		"modprobe ifb numifbs=0 2>/dev/null || true",
		"ip link add ifb0 type ifb 2>/dev/null || true",
		"ip link set dev ifb0 up",
		"tc qdisc add dev eth0 handle ffff: ingress",
		"tc filter add dev eth0 parent ffff: protocol all prio 1 matchall action mirred egress redirect dev ifb0",
	}
	tests := []struct {
		name   string
		target NetemTarget
		want   []string
	}{
		{"whole device", NetemTarget{Dev: "eth0"}, append(slices.Clone(common),
			"tc qdisc add dev eth0 root netem delay 300ms 50ms loss random 1% rate 20kbit limit 34",
			"tc qdisc add dev ifb0 root netem delay 300ms 50ms loss random 1% rate 25kbit limit 38",
		)},
		{"broker only", NetemTarget{Dev: "eth0", Peer: "192.0.2.10"}, append(slices.Clone(common),
			"tc qdisc add dev eth0 root handle 1: prio bands 4",
			"tc qdisc add dev eth0 parent 1:4 handle 40: netem delay 300ms 50ms loss random 1% rate 20kbit limit 34",
			"tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 192.0.2.10/32 flowid 1:4",
			"tc qdisc add dev ifb0 root handle 1: prio bands 4",
			"tc qdisc add dev ifb0 parent 1:4 handle 40: netem delay 300ms 50ms loss random 1% rate 25kbit limit 38",
			"tc filter add dev ifb0 parent 1: protocol ip prio 1 u32 match ip src 192.0.2.10/32 flowid 1:4",
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ApplyCommands(nbiot, tt.target)
			if !slices.Equal(got, tt.want) {
				t.Errorf("ApplyCommands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	wantClear := []string{
		"tc qdisc del dev wlan0 root 2>/dev/null || true",
		"tc qdisc del dev wlan0 handle ffff: ingress 2>/dev/null || true",
		"tc qdisc del dev ifb1 root 2>/dev/null || true",
		"ip link del ifb1 2>/dev/null || true",
	}
	if got := ClearCommands(NetemTarget{Dev: "wlan0", IFB: "ifb1"}); !slices.Equal(got, wantClear) {
		t.Errorf("ClearCommands = %q", got)
	}
}

// TestScriptUpToDate checks that scripts/netem/netem.sh is what the
// generator makes from profiles.toml (go test -update rewrites it) and
// that sh parses it.
func TestScriptUpToDate(t *testing.T) {
	path := filepath.Join("..", "..", "scripts", "netem", "netem.sh")
	want := Script(Default(), "internal/linkprofile/profiles.toml")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run go run ./internal/linkprofile/cmd/netemgen -script -o scripts/netem/netem.sh (or go test ./internal/linkprofile -update)", path)
	}
	sh := testenv.RequireTool(t, "sh")
	if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("sh -n %s: %v\n%s", path, err, out)
	}
	out, err := exec.Command(sh, path, "list").CombinedOutput()
	if err != nil || strings.Count(string(out), "\n") != 6 {
		t.Fatalf("netem.sh list: %v\n%s", err, out)
	}
	if out, err := exec.Command(sh, path, "apply", "nope", "eth0").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown profile") {
		t.Errorf("netem.sh apply nope: %v\n%s", err, out)
	}
}

// TestNetemSyntax hands every profile's netem parameters to the real tc on
// a veth in a throwaway namespace. This kernel may lack sch_netem: then
// the kernel refuses the qdisc, but tc has parsed the parameters first, so
// a parse error still shows.
func TestNetemSyntax(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "tc"} {
		testenv.RequireTool(t, tool)
	}
	ns := "lptest" + itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "va", "type", "veth", "peer", "name", "vb").CombinedOutput(); err != nil {
		t.Fatalf("add veth: %v\n%s", err, out)
	}
	for _, p := range Default().All() {
		for dir, d := range map[string]netimpair.Direction{"up": p.Up, "down": p.Down} {
			args := append([]string{"netns", "exec", ns, "tc", "qdisc", "replace", "dev", "va", "root", "netem"}, strings.Fields(NetemArgs(d))...)
			out, err := exec.Command("ip", args...).CombinedOutput()
			if err != nil && !strings.Contains(string(out), "Specified qdisc kind is unknown") {
				t.Errorf("%s %s: tc rejected %q: %v\n%s", p.Name, dir, NetemArgs(d), err, out)
			}
		}
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// TestQUICThroughProfiles runs a real QUIC connection through the
// emulator with the fast profiles: the handshake takes at least one RTT of
// the profile and data gets through the loss.
func TestQUICThroughProfiles(t *testing.T) {
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.TLS.Leaf)
	for _, name := range []string{"lan", "wifi", "lossy"} {
		t.Run(name, func(t *testing.T) {
			p, err := Get(name)
			if err != nil {
				t.Fatal(err)
			}
			udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			tr := &quic.Transport{Conn: udp}
			t.Cleanup(func() { tr.Close(); udp.Close() })
			ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"t"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				conn, err := ln.Accept(context.Background())
				if err != nil {
					return
				}
				s, err := conn.AcceptStream(context.Background())
				if err != nil {
					return
				}
				io.Copy(s, s)
				s.Close()
			}()
			relay, err := netimpair.New(netimpair.Options{Upstream: udp.LocalAddr().String(), Up: p.Up, Down: p.Down, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { relay.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			conn, err := quic.DialAddr(ctx, relay.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"t"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseWithError(0, "")
			hs := time.Since(start)
			if hs < p.RTT() {
				t.Errorf("handshake %v shorter than the profile's RTT %v", hs, p.RTT())
			}
			s, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			msg := bytes.Repeat([]byte("quiot"), 4000)
			go func() { s.Write(msg); s.Close() }()
			got, err := io.ReadAll(s)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo: %d bytes, err %v", len(got), err)
			}
			t.Logf("%s: handshake %v (RTT %v), relay %+v", name, hs, p.RTT(), relay.Stats())
		})
	}
}

// TestScriptRunsApplyCommands runs netem.sh apply for every profile, with
// and without a peer, with tc, ip and modprobe replaced by stand-ins that
// print their arguments: the script must run what ApplyCommands says,
// after clearing the device (ClearCommands), in that order.
func TestScriptRunsApplyCommands(t *testing.T) {
	sh := testenv.RequireTool(t, "sh")
	bin := t.TempDir()
	for _, c := range []string{"tc", "ip", "modprobe"} {
		if err := os.WriteFile(filepath.Join(bin, c), []byte("#!/bin/sh\necho "+c+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join("..", "..", "scripts", "netem", "netem.sh")
	// plain is how a command line prints through the stand-ins: no
	// redirections, no quotes.
	plain := func(cmds []string) []string {
		out := make([]string, len(cmds))
		for i, c := range cmds {
			out[i] = strings.TrimSuffix(c, " 2>/dev/null || true")
		}
		return out
	}
	for _, p := range Default().All() {
		for _, peer := range []string{"", "192.0.2.7"} {
			t.Run(p.Name+"/peer="+peer, func(t *testing.T) {
				target := NetemTarget{Dev: "eth9", Peer: peer}
				want := append(plain(ClearCommands(target)), plain(ApplyCommands(p, target))...)
				args := []string{script, "apply", p.Name, "eth9"}
				if peer != "" {
					args = append(args, peer)
				}
				cmd := exec.Command(sh, args...)
				cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("netem.sh apply: %v\n%s", err, out)
				}
				got := strings.Split(strings.TrimSpace(string(out)), "\n")
				if len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "applied "+p.Name) {
					t.Fatalf("no closing line:\n%s", out)
				}
				if got = got[:len(got)-1]; !slices.Equal(got, want) {
					t.Errorf("ran\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}
