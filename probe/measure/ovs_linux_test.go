//go:build linux

package measure_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/netns/netnstest"

	"golang.org/x/sys/unix"

	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/probe/measure"
)

// testOVS is a minimal throwaway Open vSwitch (userspace datapath) for this
// package's tests, after the recipe in ENVIRONMENT.md. The lab's real one is
// probe/ovs.
type testOVS struct {
	dir string
	env []string
}

func (o *testOVS) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), o.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// lockHost takes the host-wide lock probe/ovs's testbeds take (flock on
// $TMPDIR/ovsprobe-testbed.lock) until the test ends: OVS userspace
// datapaths in one network namespace share the "ovs-netdev" tap device, so
// only one may run at a time.
func lockHost(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "ovsprobe-testbed.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(8 * time.Minute) // a lab run may hold it for minutes
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("host OVS lock: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { f.Close() }) // closing drops the flock
}

func startOVS(t testing.TB) *testOVS {
	t.Helper()
	for _, tool := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"} {
		testenv.RequireTool(t, tool)
	}
	schema := "/usr/share/openvswitch/vswitch.ovsschema"
	if _, err := os.Stat(schema); err != nil {
		testenv.Unavailable(t, "%s missing (openvswitch-switch)", schema)
	}
	lockHost(t)
	d, err := os.MkdirTemp("", "measure-ovs-test-")
	if err != nil {
		t.Fatal(err)
	}
	o := &testOVS{dir: d, env: []string{"OVS_RUNDIR=" + d, "OVS_LOGDIR=" + d, "OVS_DBDIR=" + d}}
	t.Cleanup(func() { o.stop(); os.RemoveAll(d) })
	db := filepath.Join(d, "conf.db")
	o.run(t, "ovsdb-tool", "create", db, schema)
	o.run(t, "ovsdb-server", db, "--remote=punix:"+d+"/db.sock", "--pidfile="+d+"/ovsdb-server.pid",
		"--unixctl="+d+"/ovsdb-server.ctl", "--log-file="+d+"/ovsdb-server.log", "--detach")
	o.run(t, "ovs-vsctl", "--db=unix:"+d+"/db.sock", "--no-wait", "init")
	o.run(t, "ovs-vswitchd", "unix:"+d+"/db.sock", "--disable-system", "--pidfile="+d+"/ovs-vswitchd.pid",
		"--unixctl="+d+"/ovs-vswitchd.ctl", "--log-file="+d+"/ovs-vswitchd.log", "--detach")
	return o
}

func (o *testOVS) vsctl(t testing.TB, args ...string) string {
	return o.run(t, "ovs-vsctl", append([]string{"--db=unix:" + o.dir + "/db.sock", "--timeout=10"}, args...)...)
}

// bridge creates a netdev bridge with in and out as OpenFlow ports 1 and 2
// and one rule forwarding 1 -> 2. The netdev datapath creates a tap device
// named after the bridge in this namespace: give it a unique name.
func (o *testOVS) bridge(t testing.TB, br, in, out string) {
	t.Helper()
	o.vsctl(t, "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
	o.vsctl(t, "add-port", br, in, "--", "set", "Interface", in, "ofport_request=1")
	o.vsctl(t, "add-port", br, out, "--", "set", "Interface", out, "ofport_request=2")
	o.waitBridge(t, br)
	o.run(t, "ovs-ofctl", "del-flows", br)
	o.run(t, "ovs-ofctl", "add-flow", br, "priority=100,in_port=1,actions=output:2")
}

// waitBridge waits until ovs-vswitchd has created the bridge's OpenFlow
// management socket.
func (o *testOVS) waitBridge(t testing.TB, br string) {
	t.Helper()
	sock := filepath.Join(o.dir, br+".mgmt")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(o.dir, "ovs-vswitchd.log"))
			alive := "not running"
			if b, err := os.ReadFile(filepath.Join(o.dir, "ovs-vswitchd.pid")); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, 0) == nil {
					alive = fmt.Sprintf("running as %d", pid)
				}
			}
			t.Fatalf("bridge %s: no %s after 10 s; ovs-vswitchd %s; log:\n%s", br, sock, alive, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop asks both daemons to exit and kills (by their pid files) any that
// do not.
func (o *testOVS) stop() {
	for _, name := range []string{"ovs-vswitchd", "ovsdb-server"} {
		args := []string{"-t", filepath.Join(o.dir, name+".ctl"), "exit"}
		if name == "ovs-vswitchd" {
			args = append(args, "--cleanup")
		}
		cmd := exec.Command("ovs-appctl", append([]string{"--timeout=5"}, args...)...)
		cmd.Env = append(os.Environ(), o.env...)
		_ = cmd.Run()
		b, err := os.ReadFile(filepath.Join(o.dir, name+".pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			for i := 0; i < 50 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if syscall.Kill(pid, 0) == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// TestRunThroughOVS measures through a real OVS userspace datapath: the
// path's two current-namespace veth ends are OVS ports 1 and 2 with one
// explicit forwarding rule.
func TestRunThroughOVS(t *testing.T) {
	netnstest.NeedRoot(t)
	p := floorPath(t, false)
	o := startOVS(t)
	o.bridge(t, p.GenNS+"br", p.Ingress, p.Egress)
	r, err := measure.Run(context.Background(), measure.Options{IngressIf: p.Ingress, EgressIf: p.Egress,
		GenNamespace: p.GenNS, Dst: netip.AddrPortFrom(p.Dst, 9500), SinkNamespace: p.SinkNS},
		measure.Condition{Size: 128, Rate: 1000, Flows: 4, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("OVS netdev: sent %d matched %d lost %d dup %d reord %d; first (cold) %v, flow firsts %v; min %v p50 %v p99 %v",
		r.Sent, r.Matched, r.Lost, r.Duplicated, r.Reordered, r.FirstDelay, r.FlowFirstDelays,
		pct(r.Delays, 0), pct(r.Delays, 0.5), pct(r.Delays, 0.99))
	if r.Sent == 0 || r.Matched < r.Sent*95/100 || r.Duplicated != 0 {
		t.Errorf("through OVS: %d sent, %d matched, %d duplicated", r.Sent, r.Matched, r.Duplicated)
	}
}
