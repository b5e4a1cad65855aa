//go:build linux

package netns_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/probe/netns"
)

func needRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "ethtool"} {
		testenv.RequireTool(t, tool)
	}
}

func nsInode(t *testing.T) uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestPathAndDo(t *testing.T) {
	needRoot(t)
	p, err := netns.NewPath(netns.PathOptions{Bridge: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			p.Close()
		}
	})
	if !netns.Exists(p.GenNS) || !netns.Exists(p.SinkNS) {
		t.Fatal("namespaces missing")
	}
	for _, ifname := range []string{p.Ingress, p.Egress, p.Bridge} {
		if _, err := net.InterfaceByName(ifname); err != nil {
			t.Errorf("%s: %v", ifname, err)
		}
	}
	err = netns.Do(p.GenNS, func() error {
		if _, err := net.InterfaceByName(p.GenDev); err != nil {
			return err
		}
		if _, err := net.InterfaceByName(p.Ingress); err == nil {
			return errors.New("root-namespace interface visible inside the namespace")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The thread is back: the interface of this namespace is visible again.
	if _, err := net.InterfaceByName(p.Ingress); err != nil {
		t.Errorf("after Do: %v", err)
	}
	want := errors.New("boom")
	if err := netns.Do(p.GenNS, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("Do error = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if netns.Exists(p.GenNS) || netns.Exists(p.SinkNS) {
		t.Error("namespaces left behind")
	}
	for _, ifname := range []string{p.Ingress, p.Egress, p.Bridge} {
		if _, err := net.InterfaceByName(ifname); err == nil {
			t.Errorf("%s left behind", ifname)
		}
	}
}

func TestDoRestoresNamespace(t *testing.T) {
	needRoot(t)
	var topo netns.Topology
	t.Cleanup(func() { topo.Close() })
	if err := topo.AddNS("opdo-test"); err != nil {
		t.Fatal(err)
	}
	before := nsInode(t)
	var inside uint64
	if err := netns.Do("opdo-test", func() error { inside = nsInode(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside == before {
		t.Error("Do did not switch namespaces")
	}
}

func TestErrors(t *testing.T) {
	needRoot(t)
	err := netns.Do("no-such-namespace", func() error { return nil })
	if err == nil || !strings.Contains(err.Error(), "no-such-namespace") {
		t.Errorf("Do on a missing namespace: %v", err)
	}
	if _, err := netns.NewPath(netns.PathOptions{Prefix: "much-too-long"}); err == nil {
		t.Error("long prefix accepted")
	}
	// A clash half way through leaves nothing of the failed path behind.
	var topo netns.Topology
	t.Cleanup(func() { topo.Close() })
	if err := topo.AddNS("opclashs"); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.NewPath(netns.PathOptions{Prefix: "opclash"}); err == nil {
		t.Fatal("path built over an existing namespace")
	}
	if netns.Exists("opclashg") {
		t.Error("failed path left its generator namespace")
	}
	if _, err := net.InterfaceByName("opclashg1"); err == nil {
		t.Error("failed path left a veth")
	}
}
