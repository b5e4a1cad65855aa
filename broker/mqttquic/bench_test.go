package mqttquic

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testenv"
)

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fanout runs msgs 128-byte QoS 0 publishes from one client to nsubs
// subscribers of url (clients from mk) with a window of outstanding
// deliveries, and returns the elapsed time once all were delivered.
func fanout(b *testing.B, mk func(testing.TB) client.Client, nsubs, msgs int, start func()) time.Duration {
	b.Helper()
	const window = 256
	counts := make([]atomic.Int64, nsubs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready sync.WaitGroup
	var done sync.WaitGroup
	var failed atomic.Value // error of a subscriber
	check := func() {
		if err, _ := failed.Load().(error); err != nil {
			b.Fatalf("subscriber: %v", err)
		}
	}
	for i := range nsubs {
		c := mk(b)
		ready.Add(1)
		var once sync.Once
		sctx := client.WithSubscribed(ctx, func() { once.Do(ready.Done) })
		done.Add(1)
		go func() {
			defer done.Done()
			if err := c.Subscribe(sctx, "fan/out", 0, func(client.Message) { counts[i].Add(1) }); err != nil {
				failed.Store(err)
				once.Do(ready.Done)
			}
		}()
	}
	ready.Wait()
	check()
	pub := mk(b)
	payload := bytes.Repeat([]byte("x"), 128)
	minCount := func() int64 {
		m := counts[0].Load()
		for i := 1; i < nsubs; i++ {
			m = min(m, counts[i].Load())
		}
		return m
	}
	if start != nil {
		start()
	}
	t0 := time.Now()
	for i := 0; i < msgs; i++ {
		if _, err := pub.Publish(ctx, "fan/out", payload, client.PublishOptions{QoS: 0}); err != nil {
			b.Fatal(err)
		}
		for int64(i+1)-minCount() > window {
			time.Sleep(50 * time.Microsecond) // polling the subscribers' counters
		}
	}
	deadline := time.Now().Add(time.Minute)
	for minCount() < int64(msgs) {
		check()
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d delivered to the slowest subscriber", minCount(), msgs)
		}
		time.Sleep(50 * time.Microsecond)
	}
	el := time.Since(t0)
	cancel()
	done.Wait()
	return el
}

// BenchmarkFanout: one publisher, 100 MQTT-over-QUIC subscribers, 128-byte
// QoS 0 messages, through the bridged broker (as `quiot broker` runs it).
// Reports deliveries/s and the whole process's CPU per delivery (broker and
// the 101 clients together, as broker's BenchmarkFanout does for HTTP/3).
func BenchmarkFanout(b *testing.B) {
	const nsubs = 100
	br := startBridged(b, nil)
	url := quicURL(br.mqtt)
	// Reconnect: 101 simultaneous handshakes can overflow quic-go's accept
	// queue (32) on a loaded machine; refused clients retry.
	mk := func(tb testing.TB) client.Client {
		return newClient(tb, br.pki, url, func(o *client.Options) { o.Reconnect = true; o.MaxBackoff = time.Second })
	}
	var cpu0 time.Duration
	b.ResetTimer()
	el := fanout(b, mk, nsubs, b.N, func() { cpu0 = cpuTime() })
	cpu := cpuTime() - cpu0
	b.StopTimer()
	deliveries := float64(b.N) * nsubs
	b.ReportMetric(deliveries/el.Seconds(), "deliveries/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/deliveries, "cpu-ns/delivery")
}

// BenchmarkLatency: publish -> delivery latency over MQTT over QUIC at 100
// msg/s, QoS 1, 128 bytes, one subscriber, measured from the "quiot-time"
// stamp. Run with a fixed count, e.g. -benchtime=500x (5 s).
func BenchmarkLatency(b *testing.B) {
	br := startBridged(b, nil)
	url := quicURL(br.mqtt)
	sub := newClient(b, br.pki, url, nil)
	pub := newClient(b, br.pki, url, nil)
	lat := make(chan time.Duration, b.N+16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		_ = sub.Subscribe(client.WithSubscribed(ctx, func() { once.Do(func() { close(ready) }) }), "lat", 0, func(m client.Message) { lat <- m.Latency() })
	}()
	<-ready
	payload := bytes.Repeat([]byte("x"), 128)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		if _, err := pub.Publish(ctx, "lat", payload, client.PublishOptions{QoS: 1}); err != nil {
			b.Fatal(err)
		}
	}
	ls := make([]time.Duration, 0, b.N)
	for len(ls) < b.N {
		select {
		case l := <-lat:
			ls = append(ls, l)
		case <-time.After(10 * time.Second):
			b.Fatalf("received %d of %d", len(ls), b.N)
		}
	}
	b.StopTimer()
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	q := func(p float64) float64 {
		return float64(ls[min(len(ls)-1, int(p*float64(len(ls))))].Nanoseconds()) / 1e6
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(ls[len(ls)-1].Nanoseconds())/1e6, "max-ms")
}

// brokerProc is an MQTT broker running as a child process.
type brokerProc struct {
	cmd  *exec.Cmd
	addr string
	proc procfs.Proc
}

func (p *brokerProc) cpu(b testing.TB) time.Duration {
	st, err := p.proc.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second))
}

// writes is the number of write syscalls the process has made so far
// (write, writev, sendmsg: syscw in /proc/PID/io).
func (p *brokerProc) writes(b testing.TB) uint64 {
	io, err := p.proc.IO()
	if err != nil {
		b.Fatal(err)
	}
	return io.SyscW
}

// hwm is the peak resident set (VmHWM) in KiB.
func (p *brokerProc) hwm(b testing.TB) uint64 {
	st, err := p.proc.NewStatus()
	if err != nil {
		b.Fatal(err)
	}
	return st.VmHWM / 1024
}

func freePort(b testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return portOf(l.Addr().String())
}

func waitTCP(b testing.TB, addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("broker at %s not ready: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // readiness polling
	}
}

// startProc starts cmd; at cleanup it calls stop (if any), gives the
// process two seconds to exit, then kills it.
func startProc(b testing.TB, cmd *exec.Cmd, stop func()) procfs.Proc {
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		if stop != nil {
			stop()
			select {
			case <-exited:
				return
			case <-time.After(2 * time.Second):
			}
		}
		_ = cmd.Process.Kill()
		<-exited
	})
	p, err := procfs.NewProc(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// startMosquitto starts Debian's mosquitto on loopback with conf (its
// listener lines and their options, e.g. "listener PORT 127.0.0.1\n")
// ahead of the common lines (anonymous clients, no persistence, errors on
// stderr), waits until each of addrs accepts TCP connections, and kills
// it at cleanup. The returned process's addr is addrs[0]. Without
// mosquitto the benchmark skips, saying why (fails under CI=true).
func startMosquitto(b testing.TB, conf string, addrs ...string) *brokerProc {
	b.Helper()
	bin := testenv.RequireTool(b, "mosquitto")
	file := filepath.Join(b.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(file, []byte(conf+"allow_anonymous true\npersistence false\nlog_dest stderr\nlog_type error\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", file)
	bp := &brokerProc{cmd: cmd, addr: addrs[0]}
	bp.proc = startProc(b, cmd, nil)
	for _, a := range addrs {
		waitTCP(b, a)
	}
	return bp
}

// mosquittoListener is a mosquitto listener line on a free loopback port,
// and its address.
func mosquittoListener(b testing.TB) (line, addr string) {
	port := freePort(b)
	return fmt.Sprintf("listener %s 127.0.0.1\n", port), "127.0.0.1:" + port
}

func startOurs(b testing.TB) *brokerProc {
	// BENCH_BROKER_BIN names a prebuilt benchbroker (e.g. of another
	// commit, to compare); by default it is built from this tree.
	bin := os.Getenv("BENCH_BROKER_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "benchbroker")
		if out, err := exec.Command("go", "build", "-o", bin, "./internal/benchbroker").CombinedOutput(); err != nil {
			b.Fatalf("build benchbroker: %v: %s", err, out)
		}
	}
	// BENCH_BROKER_ARGS adds flags (space-separated) to benchbroker's.
	cmd := exec.Command(bin, append([]string{"-tcp", "127.0.0.1:0"}, strings.Fields(os.Getenv("BENCH_BROKER_ARGS"))...)...)
	// BENCH_BROKER_GOMAXPROCS, _GOGC and _GOMEMLIMIT set the broker's runtime
	// knobs without touching the benchmark process (e.g. 1 for a Pi Zero).
	cmd.Env = os.Environ()
	for _, k := range []string{"GOMAXPROCS", "GOGC", "GOMEMLIMIT"} {
		if v := os.Getenv("BENCH_BROKER_" + k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // closing it ends the broker
	if err != nil {
		b.Fatal(err)
	}
	bp := &brokerProc{cmd: cmd}
	bp.proc = startProc(b, cmd, func() { _ = stdin.Close() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		b.Fatalf("benchbroker: %q %v", line, err)
	}
	bp.addr = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	waitTCP(b, bp.addr)
	return bp
}

// BenchmarkTCPVersusMosquitto runs the same workload (our MQTT client, one
// publisher, 50 subscribers, 128-byte QoS 0 messages, b.N messages) against
// quiot's MQTT/TCP listener (bridged broker, own process) and Debian's
// mosquitto, and reports each broker process's deliveries/s, CPU per
// delivery (utime+stime from /proc), write syscalls per delivery, peak RSS,
// and the ratios quiot/mosquitto. Target: cpu-ratio <= 1.5.
func BenchmarkTCPVersusMosquitto(b *testing.B) {
	const nsubs = 50
	type result struct {
		rate, cpuNs, writes float64
		hwm                 uint64
	}
	run := func(bp *brokerProc) result {
		url := "mqtt://" + bp.addr
		mk := func(tb testing.TB) client.Client {
			c, err := client.New(client.Options{Broker: url, Logger: discard(), Reconnect: true, MaxBackoff: time.Second})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = c.Close() })
			return c
		}
		var cpu0 time.Duration
		var w0 uint64
		el := fanout(b, mk, nsubs, b.N, func() { cpu0, w0 = bp.cpu(b), bp.writes(b) })
		cpu, w := bp.cpu(b)-cpu0, bp.writes(b)-w0
		d := float64(b.N) * nsubs
		return result{rate: d / el.Seconds(), cpuNs: float64(cpu.Nanoseconds()) / d, writes: float64(w) / d, hwm: bp.hwm(b)}
	}
	l, addr := mosquittoListener(b)
	mosq := startMosquitto(b, l, addr)
	ours := startOurs(b)
	b.ResetTimer()
	rm := run(mosq)
	ro := run(ours)
	b.StopTimer()
	b.ReportMetric(ro.rate, "quiot-deliveries/s")
	b.ReportMetric(rm.rate, "mosq-deliveries/s")
	b.ReportMetric(ro.cpuNs, "quiot-cpu-ns/delivery")
	b.ReportMetric(rm.cpuNs, "mosq-cpu-ns/delivery")
	b.ReportMetric(ro.writes, "quiot-writes/delivery")
	b.ReportMetric(rm.writes, "mosq-writes/delivery")
	b.ReportMetric(float64(ro.hwm), "quiot-peak-rss-KiB")
	b.ReportMetric(float64(rm.hwm), "mosq-peak-rss-KiB")
	b.ReportMetric(ro.rate/rm.rate, "rate-ratio")
	b.ReportMetric(ro.cpuNs/rm.cpuNs, "cpu-ratio")
	b.ReportMetric(float64(ro.hwm)/float64(rm.hwm), "rss-ratio")
}
