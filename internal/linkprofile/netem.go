package linkprofile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/quiot/quiot/internal/netimpair"
)

// NetemTarget says where tc netem shapes a profile on a real testbed,
// from the device's point of view: Up on Dev's egress, Down on Dev's
// ingress, redirected through the IFB device.
type NetemTarget struct {
	// Dev is the device's network interface ("eth0", "wlan0"). Required.
	Dev string
	// IFB is the intermediate functional block device that carries the
	// ingress (down) direction. Default "ifb0".
	IFB string
	// Peer, if set, is the broker's IPv4 address: only traffic to and from
	// it is shaped (a prio qdisc with a u32 filter), so ssh and the rest
	// stay fast. Default: shape everything on Dev.
	Peer string
}

func (t NetemTarget) withDefaults() NetemTarget {
	if t.IFB == "" {
		t.IFB = "ifb0"
	}
	return t
}

// netemMinPacket is the smallest packet size assumed when sizing netem's
// limit, which counts every packet held in the qdisc, delayed ones
// included (unlike the emulator's queue limit, which counts only those
// waiting for the link).
const netemMinPacket = 64

// tcTime formats a duration for tc ("300ms", "250us").
func tcTime(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return strconv.FormatInt(int64(d/time.Microsecond), 10) + "us"
}

// pct formats a percentage for tc ("0.3%").
func pct(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64) + "%"
}

// NetemLimit returns the netem "limit" (packets) for a direction: its
// queue limit plus the packets that can be in the delay line at the rate
// (with 64-byte packets); 1000 plus the queue limit without a rate.
func NetemLimit(d netimpair.Direction) int {
	q := d.QueueLimit
	if q == 0 {
		q = 1000
	}
	if d.RateKbit <= 0 {
		return q + 1000
	}
	inflight := d.RateKbit * 1000 * (d.Delay + d.Jitter).Seconds() / (8 * netemMinPacket)
	return q + int(math.Ceil(inflight))
}

// NetemArgs returns the netem parameters of a direction, e.g.
// "delay 300ms 50ms loss random 1% rate 20kbit limit 45".
//
// netem has one loss model per qdisc, so random loss and Gilbert-Elliott
// loss are folded into one gemodel with the same statistics: the random
// loss applies in both states, as the emulator applies it after the burst
// model. Jitter does not reorder when a rate is set (netem schedules
// behind the previous packet); all built-in profiles set one. netem's
// chain moves per packet only: a burst's Step (time) has no netem
// equivalent and is left out, so on netem a burst can outlast a silence.
func NetemArgs(d netimpair.Direction) string {
	var b []string
	if d.Delay > 0 || d.Jitter > 0 {
		s := "delay " + tcTime(d.Delay)
		if d.Jitter > 0 {
			s += " " + tcTime(d.Jitter)
		}
		b = append(b, s)
	}
	g := d.Burst
	switch {
	case g.Enabled():
		lossBad := g.LossBad
		if lossBad == 0 {
			lossBad = 100
		}
		r := d.LossPct / 100
		bad := 100 * (1 - (1-lossBad/100)*(1-r))
		good := 100 * (1 - (1-g.LossGood/100)*(1-r))
		b = append(b, fmt.Sprintf("loss gemodel %s %s %s %s", pct(g.P), pct(g.R), pct(round(bad)), pct(round(good))))
	case d.LossPct > 0:
		b = append(b, "loss random "+pct(d.LossPct))
	}
	if d.RateKbit > 0 {
		if d.RateKbit == math.Trunc(d.RateKbit) {
			b = append(b, fmt.Sprintf("rate %dkbit", int64(d.RateKbit)))
		} else {
			b = append(b, fmt.Sprintf("rate %dbit", int64(math.Round(d.RateKbit*1000))))
		}
	}
	b = append(b, fmt.Sprintf("limit %d", NetemLimit(d)))
	return strings.Join(b, " ")
}

// round keeps 4 decimals (tc parses percentages as floats).
func round(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// ApplyCommands returns the shell commands that apply p with tc netem on
// a testbed device: Up on t.Dev's egress, Down on its ingress via t.IFB.
// They expect a clean device (run ClearCommands first).
func ApplyCommands(p Profile, t NetemTarget) []string {
	return applyCommands(NetemArgs(p.Up), NetemArgs(p.Down), t)
}

// applyCommands is ApplyCommands with the netem arguments of each
// direction given (the script passes shell variables).
func applyCommands(up, down string, t NetemTarget) []string {
	t = t.withDefaults()
	cmds := []string{
		"modprobe sch_netem 2>/dev/null || true",
		"modprobe ifb numifbs=0 2>/dev/null || true",
		fmt.Sprintf("ip link add %s type ifb 2>/dev/null || true", t.IFB),
		fmt.Sprintf("ip link set dev %s up", t.IFB),
		fmt.Sprintf("tc qdisc add dev %s handle ffff: ingress", t.Dev),
		fmt.Sprintf("tc filter add dev %s parent ffff: protocol all prio 1 matchall action mirred egress redirect dev %s", t.Dev, t.IFB),
	}
	if t.Peer == "" {
		return append(cmds,
			fmt.Sprintf("tc qdisc add dev %s root netem %s", t.Dev, up),
			fmt.Sprintf("tc qdisc add dev %s root netem %s", t.IFB, down),
		)
	}
	// A 4-band prio qdisc: the default priomap uses bands 1-3 only, so
	// band 4 gets nothing but the broker's traffic, which the filter sends
	// there.
	for _, x := range []struct{ dev, match, args string }{
		{t.Dev, "dst", up},
		{t.IFB, "src", down},
	} {
		cmds = append(cmds,
			fmt.Sprintf("tc qdisc add dev %s root handle 1: prio bands 4", x.dev),
			fmt.Sprintf("tc qdisc add dev %s parent 1:4 handle 40: netem %s", x.dev, x.args),
			fmt.Sprintf("tc filter add dev %s parent 1: protocol ip prio 1 u32 match ip %s %s/32 flowid 1:4", x.dev, x.match, t.Peer),
		)
	}
	return cmds
}

// ClearCommands returns the shell commands that remove what ApplyCommands
// set up. Each tolerates that there is nothing to remove.
func ClearCommands(t NetemTarget) []string {
	t = t.withDefaults()
	return []string{
		fmt.Sprintf("tc qdisc del dev %s root 2>/dev/null || true", t.Dev),
		fmt.Sprintf("tc qdisc del dev %s handle ffff: ingress 2>/dev/null || true", t.Dev),
		fmt.Sprintf("tc qdisc del dev %s root 2>/dev/null || true", t.IFB),
		fmt.Sprintf("ip link del %s 2>/dev/null || true", t.IFB),
	}
}

// Script returns a POSIX shell script that applies any profile of s with
// tc netem: "netem.sh apply PROFILE DEV [PEER_IP]", "netem.sh clear DEV",
// "netem.sh list", "netem.sh show DEV". The IFB environment variable
// names the IFB device (default ifb0). source names the profiles file in
// the header.
func Script(s *Set, source string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("#!/bin/sh\n")
	w("# Code generated by go run ./internal/linkprofile/cmd/netemgen -script from %s. DO NOT EDIT.\n", source)
	w("#\n# Applies a quiot link profile with tc netem on a real testbed (run on the\n")
	w("# device, as root): the up direction on DEV's egress, the down direction on\n")
	w("# DEV's ingress through an IFB device. With PEER_IP (the broker), only traffic\n")
	w("# to and from the broker is shaped.\n#\n")
	w("#   netem.sh apply PROFILE DEV [PEER_IP]\n#   netem.sh clear DEV\n#   netem.sh show DEV\n#   netem.sh list\n")
	w("set -eu\n\nIFB=${IFB:-ifb0}\n\n")
	w("usage() {\n\techo \"usage: $0 apply PROFILE DEV [PEER_IP] | clear DEV | show DEV | list\" >&2\n\texit 2\n}\n\n")
	vars := NetemTarget{Dev: `"$DEV"`, IFB: `"$IFB"`}
	withPeer := vars
	withPeer.Peer = `"$PEER"`
	w("clear_dev() {\n")
	for _, c := range ClearCommands(vars) {
		w("\t%s\n", c)
	}
	w("}\n\n")
	// One function shapes both directions; each profile is a line of
	// netem arguments ($1 up, $2 down: split into words on purpose).
	w("# shape UP DOWN: netem arguments UP on DEV's egress, DOWN on its ingress.\n")
	w("shape() {\n\tif [ -n \"$PEER\" ]; then\n")
	for _, c := range applyCommands("$1", "$2", withPeer) {
		w("\t\t%s\n", c)
	}
	w("\telse\n")
	for _, c := range applyCommands("$1", "$2", vars) {
		w("\t\t%s\n", c)
	}
	w("\tfi\n}\n\n")
	w("case \"${1:-}\" in\n")
	w("apply)\n\t[ $# -ge 3 ] || usage\n\tPROFILE=$2 DEV=$3 PEER=${4:-}\n\tcase \"$PROFILE\" in\n")
	for _, p := range s.All() {
		w("\t%s) # %s\n\t\tUP='%s'\n\t\tDOWN='%s' ;;\n", p.Name, p.Description, NetemArgs(p.Up), NetemArgs(p.Down))
	}
	w("\t*) echo \"unknown profile $PROFILE (known: %s)\" >&2; exit 2 ;;\n\tesac\n", strings.Join(s.Names(), " "))
	w("\tclear_dev\n\tshape \"$UP\" \"$DOWN\"\n\techo \"applied $PROFILE on $DEV (ingress via $IFB)${PEER:+, broker $PEER only}\"\n\t;;\n")
	w("clear)\n\t[ $# -ge 2 ] || usage\n\tDEV=$2\n\tclear_dev\n\t;;\n")
	w("show)\n\t[ $# -ge 2 ] || usage\n\ttc qdisc show dev \"$2\"\n\ttc qdisc show dev \"$IFB\" 2>/dev/null || true\n\t;;\n")
	w("list)\n")
	for _, p := range s.All() {
		w("\techo %q\n", fmt.Sprintf("%-6s %s (RTT %s)", p.Name, p.Description, FormatMs(p.RTT())))
	}
	w("\t;;\n*) usage ;;\nesac\n")
	return b.String()
}

// FormatMs formats a duration in milliseconds, ASCII only ("0.5ms").
func FormatMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
}
