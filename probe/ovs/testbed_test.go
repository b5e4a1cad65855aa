package ovs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testenv"
)

// needTestbed skips (saying why) unless a real testbed can run here.
func needTestbed(t *testing.T) {
	t.Helper()
	if err := CheckPrerequisites(""); err != nil {
		testenv.Unavailable(t, "OVS testbed cannot run here: %v", err)
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func assertNothingLeft(t *testing.T) {
	t.Helper()
	left, err := Leftovers(context.Background(), CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func ping(t *testing.T, ns, dst string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-c", "2", "-i", "0.1", "-W", "2", dst).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s from %s: %v\n%s", dst, ns, err, out)
	}
}

func TestTestbedLifecycle(t *testing.T) {
	needTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb, err := StartTestbed(ctx, TestbedOptions{Floor: true, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNothingLeft(t)
	})
	if tb.Version == "" || tb.Datapath != "netdev" {
		t.Fatalf("version %q datapath %q", tb.Version, tb.Datapath)
	}
	ping(t, tb.Switch.GenNS, tb.Switch.Dst.String())
	ping(t, tb.Floor.GenNS, tb.Floor.Dst.String())

	c, err := tb.OVS.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Missed == 0 || c.Hit+c.Missed < 4 || c.PMD["packets received"] < 4 {
		t.Fatalf("counters after pings: %+v", c)
	}

	t.Run("rules", func(t *testing.T) {
		if err := tb.OVS.AddFlows(ctx, tb.Bridge, FillerRules(1000, 200)); err != nil {
			t.Fatal(err)
		}
		n, err := tb.OVS.RuleCount(ctx, tb.Bridge)
		if err != nil || n != 1002 {
			t.Fatalf("RuleCount = %d, %v; want 1002", n, err)
		}
		ping(t, tb.Switch.GenNS, tb.Switch.Dst.String())
		if err := tb.ResetRules(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := tb.OVS.RuleCount(ctx, tb.Bridge); n != 2 {
			t.Fatalf("after reset %d rules", n)
		}
	})

	t.Run("datapath flush and config", func(t *testing.T) {
		ping(t, tb.Switch.GenNS, tb.Switch.Dst.String())
		before, err := tb.OVS.Snapshot(ctx)
		if err != nil || before.Flows == 0 {
			t.Fatalf("no datapath flows after a ping: %+v, %v", before, err)
		}
		if err := tb.OVS.FlushDatapathFlows(ctx); err != nil {
			t.Fatal(err)
		}
		c, err := tb.OVS.Snapshot(ctx)
		if err != nil || c.Flows >= before.Flows {
			t.Fatalf("flows after flush %d (before %d), %v", c.Flows, before.Flows, err)
		}
		if err := tb.OVS.SetOtherConfig(ctx, map[string]string{"max-idle": "30000", "emc-insert-inv-prob": "1"}); err != nil {
			t.Fatal(err)
		}
		out, err := tb.OVS.Vsctl(ctx, "get", "Open_vSwitch", ".", "other_config:max-idle")
		if err != nil || strings.Trim(strings.TrimSpace(out), `"`) != "30000" {
			t.Fatalf("max-idle = %q, %v", out, err)
		}
	})

	t.Run("cgroup limits", func(t *testing.T) {
		if err := tb.SetLimits(Limits{MemoryBytes: 256 << 20, CPUs: 0.5}); err != nil {
			t.Fatal(err)
		}
		cg := tb.Cgroup()
		var memFile, procsFile, cpuFile, wantCPU string
		if cg.V2 {
			dir := filepath.Join(CgroupRoot, cg.Name)
			memFile, procsFile, cpuFile, wantCPU = filepath.Join(dir, "memory.max"), filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cpu.max"), "50000 100000"
		} else {
			memFile = filepath.Join(CgroupRoot, "memory", cg.Name, "memory.limit_in_bytes")
			procsFile = filepath.Join(CgroupRoot, "memory", cg.Name, "cgroup.procs")
			cpuFile, wantCPU = filepath.Join(CgroupRoot, "cpu", cg.Name, "cpu.cfs_quota_us"), "50000"
		}
		for file, want := range map[string]string{memFile: fmt.Sprint(256 << 20), cpuFile: wantCPU} {
			b, err := os.ReadFile(file)
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Fatalf("%s = %q, %v; want %s", file, b, err, want)
			}
		}
		b, _ := os.ReadFile(procsFile)
		if !strings.Contains(" "+strings.Join(strings.Fields(string(b)), " ")+" ", fmt.Sprintf(" %d ", tb.VswitchdPID)) {
			t.Fatalf("vswitchd %d not in %s: %q", tb.VswitchdPID, procsFile, b)
		}
		if use, err := cg.MemoryUsage(); err != nil || use <= 0 {
			t.Fatalf("MemoryUsage = %d, %v", use, err)
		}
		ping(t, tb.Switch.GenNS, tb.Switch.Dst.String())
		if err := tb.SetLimits(Limits{}); err != nil {
			t.Fatal(err)
		}
		if !tb.Alive() {
			t.Fatal("ovs-vswitchd died")
		}
	})

	t.Run("priority", func(t *testing.T) {
		prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tb.VswitchdPID)
		// The raw syscall returns 20 - nice.
		if err != nil || 20-prio != DefaultNice {
			t.Fatalf("ovs-vswitchd nice = %d (%v), want %d", 20-prio, err, DefaultNice)
		}
	})

	t.Run("procfs", func(t *testing.T) {
		s, err := SampleProcess("", tb.VswitchdPID)
		if err != nil || s.RSSBytes <= 0 || s.PeakRSSBytes < s.RSSBytes/2 {
			t.Fatalf("SampleProcess = %+v, %v", s, err)
		}
	})
}

// TestCleanupAfterKill starts a testbed in a child process, kills the child
// with SIGKILL (no teardown runs) and checks that Cleanup removes what it
// left.
func TestCleanupAfterKill(t *testing.T) {
	if os.Getenv("OVSPROBE_TESTBED_CHILD") == "1" {
		tb, err := StartTestbed(context.Background(), TestbedOptions{Floor: true})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready", tb.ID)
		select {} // wait to be killed
	}
	needTestbed(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupAfterKill$")
	cmd.Env = append(os.Environ(), "OVSPROBE_TESTBED_CHILD=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_, _ = Cleanup(context.Background(), CleanupOptions{})
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("child: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Another package's testbed may start (and clean up) between the kill
	// and here: the same mechanism, so an empty list is not a failure.
	if left, _ := Leftovers(context.Background(), CleanupOptions{}); len(left) == 0 {
		t.Log("leftovers already removed by a concurrent testbed start")
	}
	removed, err := Cleanup(context.Background(), CleanupOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v", removed)
	assertNothingLeft(t)
}
