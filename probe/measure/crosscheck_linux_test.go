//go:build linux

package measure_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/quiot/quiot/probe/netns/netnstest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/gen"
	"github.com/quiot/quiot/probe/match"
	"github.com/quiot/quiot/probe/measure"
	"github.com/quiot/quiot/probe/netns"
)

// tcpdump starts `tcpdump -i IF -Q DIR` writing nanosecond pcap to file and
// returns once it is listening; stop() ends it and waits.
func tcpdump(t *testing.T, ifname, dir, filter, file string) (stop func()) {
	t.Helper()
	cmd := exec.Command("tcpdump", "-i", ifname, "-Q", dir, "-n", "-s", "128", "-B", "16384",
		"--time-stamp-precision=nano", "--immediate-mode", "-U", "-w", file, filter)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "listening on") {
				ready <- ""
			}
		}
		ready <- strings.Join(lines, "\n")
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}
	t.Cleanup(stop)
	select {
	case msg := <-ready:
		if msg != "" {
			t.Fatalf("tcpdump on %s exited: %s", ifname, msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("tcpdump on %s not listening after 10 s", ifname)
	}
	return stop
}

// readPcap returns probe sequence -> first timestamp from a nanosecond pcap.
func readPcap(t *testing.T, file string) map[uint64]time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b23c4d {
		t.Fatalf("%s: not a little-endian nanosecond pcap", file)
	}
	out := map[uint64]time.Time{}
	for off := 24; off+16 <= len(b); {
		sec := binary.LittleEndian.Uint32(b[off:])
		nsec := binary.LittleEndian.Uint32(b[off+4:])
		incl := int(binary.LittleEndian.Uint32(b[off+8:]))
		off += 16
		if off+incl > len(b) {
			break
		}
		u, err := match.ParseUDP(b[off : off+incl])
		off += incl
		if err != nil {
			continue
		}
		h, err := gen.Decode(u.Payload)
		if err != nil {
			continue
		}
		if _, ok := out[h.Seq]; !ok {
			out[h.Seq] = time.Unix(int64(sec), int64(nsec))
		}
	}
	return out
}

// TestCrossCheckTcpdump times the same probe packets with measure.Run and
// with two independent tcpdump captures (nanosecond timestamps) at the same
// two ports of the bridge path, and requires the per-packet delays to agree:
// median of the differences within 5 µs.
func TestCrossCheckTcpdump(t *testing.T) {
	netnstest.NeedRoot(t, "tcpdump")
	crossCheck(t, floorPath(t, true))
}

// TestCrossCheckTcpdumpOVS is the same cross-check through a real OVS
// userspace datapath.
func TestCrossCheckTcpdumpOVS(t *testing.T) {
	netnstest.NeedRoot(t, "tcpdump")
	p := floorPath(t, false)
	o := startOVS(t)
	o.bridge(t, p.GenNS+"br", p.Ingress, p.Egress)
	crossCheck(t, p)
}

func crossCheck(t *testing.T, p *netns.Path) {
	dir := t.TempDir()
	const port = 9400
	filter := fmt.Sprintf("udp dst port %d", port)
	stopIn := tcpdump(t, p.Ingress, "in", filter, filepath.Join(dir, "in.pcap"))
	stopOut := tcpdump(t, p.Egress, "out", filter, filepath.Join(dir, "out.pcap"))
	r, err := measure.Run(context.Background(), measure.Options{IngressIf: p.Ingress, EgressIf: p.Egress,
		GenNamespace: p.GenNS, Dst: netip.AddrPortFrom(p.Dst, port), SinkNamespace: p.SinkNS},
		measure.Condition{Size: 256, Rate: 2000, Flows: 2, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stopIn()
	stopOut()
	tin, tout := readPcap(t, filepath.Join(dir, "in.pcap")), readPcap(t, filepath.Join(dir, "out.pcap"))
	var diffs []time.Duration
	for i, seq := range r.Seqs {
		a, ok1 := tin[seq]
		b, ok2 := tout[seq]
		if !ok1 || !ok2 {
			continue
		}
		diffs = append(diffs, r.Delays[i]-b.Sub(a))
	}
	if len(diffs) < len(r.Seqs)*9/10 || len(diffs) == 0 {
		t.Fatalf("tcpdump saw %d/%d of the %d matched packets", len(tin), len(tout), len(r.Seqs))
	}
	abs := make([]time.Duration, len(diffs))
	for i, d := range diffs {
		abs[i] = max(d, -d)
	}
	slices.Sort(diffs)
	slices.Sort(abs)
	med := diffs[len(diffs)/2]
	t.Logf("%d packets compared: delay(ovsprobe) - delay(tcpdump): median %v, median |diff| %v, p99 |diff| %v, max |diff| %v; ovsprobe median delay %v",
		len(diffs), med, abs[len(abs)/2], abs[len(abs)*99/100], abs[len(abs)-1], median(r.Delays))
	if med > 5*time.Microsecond || med < -5*time.Microsecond {
		t.Errorf("median difference %v exceeds 5 µs", med)
	}
}
