package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
)

// IP runs `ip ARGS...` and returns its error with the command's output.
func IP(args ...string) error { return run("ip", args...) }

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Topology records the namespaces and links it creates so that Close removes
// all of them, in reverse order, also after a partial failure.
type Topology struct {
	mu   sync.Mutex
	undo [][]string // ip argument lists, run in reverse by Close
}

// AddNS creates a network namespace and brings its loopback up.
func (t *Topology) AddNS(name string) error {
	if err := IP("netns", "add", name); err != nil {
		return err
	}
	t.push("netns", "del", name)
	return IP("-n", name, "link", "set", "lo", "up")
}

// Veth creates a veth pair a<->b with the given MAC addresses ("" = random),
// moves each end into its namespace ("" = the current one), brings both up and
// turns transmit checksum offload off on both ends (`ethtool -K tx off`), which
// the OVS userspace datapath needs or it silently drops UDP and TCP.
func (t *Topology) Veth(a, macA, nsA, b, macB, nsB string) error {
	args := []string{"link", "add", a}
	if macA != "" {
		args = append(args, "address", macA)
	}
	args = append(args, "type", "veth", "peer", "name", b)
	if macB != "" {
		args = append(args, "address", macB)
	}
	if err := IP(args...); err != nil {
		return err
	}
	// Deleting either end deletes the pair. Delete it synchronously from
	// an end's namespace (a namespace's deletion would do it too, but
	// asynchronously).
	t.push("link", "del", a) // in case a move below fails and the pair stays here
	switch {
	case nsB == "":
		t.push("link", "del", b)
	case nsA == "":
		t.push("link", "del", a)
	default:
		t.push("-n", nsA, "link", "del", a)
	}
	for _, e := range []struct{ dev, ns string }{{a, nsA}, {b, nsB}} {
		if e.ns != "" {
			if err := IP("link", "set", e.dev, "netns", e.ns); err != nil {
				return err
			}
		}
		if err := IP(nsArgs(e.ns, "link", "set", e.dev, "up")...); err != nil {
			return err
		}
		if err := TxOff(e.ns, e.dev); err != nil {
			return err
		}
	}
	return nil
}

// TxOff runs `ethtool -K DEV tx off` in namespace ns ("" = current).
func TxOff(ns, dev string) error {
	if ns == "" {
		return run("ethtool", "-K", dev, "tx", "off")
	}
	return run("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off")
}

// Bridge creates a plain Linux bridge (no STP, no forwarding delay) in the
// current namespace and enslaves the given ports.
func (t *Topology) Bridge(name string, ports ...string) error {
	if err := IP("link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
		return err
	}
	t.push("link", "del", name)
	for _, p := range ports {
		if err := IP("link", "set", p, "master", name); err != nil {
			return err
		}
	}
	return IP("link", "set", name, "up")
}

// Addr adds an address (CIDR) to dev in namespace ns.
func (t *Topology) Addr(ns, dev, cidr string) error {
	return IP(nsArgs(ns, "addr", "add", cidr, "dev", dev)...)
}

// Neigh adds a permanent neighbour entry so the first probe packet is not
// held back by ARP resolution.
func (t *Topology) Neigh(ns, dev string, addr netip.Addr, mac string) error {
	return IP(nsArgs(ns, "neigh", "replace", addr.String(), "lladdr", mac, "dev", dev, "nud", "permanent")...)
}

func (t *Topology) push(args ...string) {
	t.mu.Lock()
	t.undo = append(t.undo, args)
	t.mu.Unlock()
}

// Close removes everything the topology created. Objects already gone (a veth
// removed with its namespace) are not errors.
func (t *Topology) Close() error {
	t.mu.Lock()
	undo := t.undo
	t.undo = nil
	t.mu.Unlock()
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := IP(undo[i]...); err != nil && !gone(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func gone(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Cannot find device") || strings.Contains(s, "No such file") ||
		strings.Contains(s, "does not exist") || strings.Contains(s, "No such device")
}

func nsArgs(ns string, args ...string) []string {
	if ns == "" {
		return args
	}
	return append([]string{"-n", ns}, args...)
}

// Path is a two-namespace test path: a generator namespace and a sink
// namespace, each joined by a veth pair to the current namespace, whose
// current-namespace ends (Ingress, Egress) are either enslaved to a plain Linux
// bridge (the probe floor) or left free for a switch under test (OVS).
//
//	[GenNS: GenDev Src] <-veth-> Ingress --(bridge | OVS)--> Egress <-veth-> [SinkNS: SinkDev Dst]
type Path struct {
	Topology
	GenNS, SinkNS   string     // namespace names
	GenDev, SinkDev string     // namespace-side veth ends
	Ingress, Egress string     // current-namespace veth ends (capture here)
	Bridge          string     // the Linux bridge, "" if none
	Src, Dst        netip.Addr // generator and sink addresses
	GenMAC, SinkMAC string
}

// PathOptions configures NewPath.
type PathOptions struct {
	// Prefix for every name; default "op" + 4 random hex digits. Names stay
	// within the 15-byte interface name limit when Prefix has <= 10 bytes.
	Prefix string
	// Bridge joins Ingress and Egress with a plain Linux bridge (the floor).
	Bridge bool
	// Subnet is the /24 for Src (.1) and Dst (.2); default 10.201.0.0/24.
	Subnet netip.Prefix
}

// NewPath builds the path. On error everything built so far is removed.
func NewPath(o PathOptions) (*Path, error) {
	if o.Prefix == "" {
		var b [2]byte
		_, _ = rand.Read(b[:])
		o.Prefix = "op" + hex.EncodeToString(b[:])
	}
	if len(o.Prefix) > 10 {
		return nil, fmt.Errorf("path prefix %q too long (max 10 bytes)", o.Prefix)
	}
	if !o.Subnet.IsValid() {
		o.Subnet = netip.MustParsePrefix("10.201.0.0/24")
	}
	base := o.Subnet.Masked().Addr().As4()
	src, dst := base, base
	src[3], dst[3] = 1, 2
	p := &Path{
		GenNS: o.Prefix + "g", SinkNS: o.Prefix + "s",
		GenDev: o.Prefix + "g0", Ingress: o.Prefix + "g1",
		SinkDev: o.Prefix + "s0", Egress: o.Prefix + "s1",
		Src: netip.AddrFrom4(src), Dst: netip.AddrFrom4(dst),
		GenMAC: "02:00:00:00:01:01", SinkMAC: "02:00:00:00:02:01",
	}
	err := p.build(o)
	if err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

func (p *Path) build(o PathOptions) error {
	bits := fmt.Sprintf("/%d", o.Subnet.Bits())
	steps := []func() error{
		func() error { return p.AddNS(p.GenNS) },
		func() error { return p.AddNS(p.SinkNS) },
		func() error { return p.Veth(p.GenDev, p.GenMAC, p.GenNS, p.Ingress, "", "") },
		func() error { return p.Veth(p.SinkDev, p.SinkMAC, p.SinkNS, p.Egress, "", "") },
		func() error { return p.Addr(p.GenNS, p.GenDev, p.Src.String()+bits) },
		func() error { return p.Addr(p.SinkNS, p.SinkDev, p.Dst.String()+bits) },
		func() error { return p.Neigh(p.GenNS, p.GenDev, p.Dst, p.SinkMAC) },
		func() error { return p.Neigh(p.SinkNS, p.SinkDev, p.Src, p.GenMAC) },
	}
	if o.Bridge {
		p.Bridge = o.Prefix + "br"
		steps = append(steps, func() error { return p.Topology.Bridge(p.Bridge, p.Ingress, p.Egress) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}
