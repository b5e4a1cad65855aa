// Command bridge-bench compares quiot's bridge with mosquitto's own
// bridge under the same load, the same emulated link and the same blackout
// of it (docs/bridge.md, results in docs/results/bridge/README.md).
//
// Each variant runs its own edge broker, upstream broker and link between
// them, all variants at once. The link emulates -link's profile of
// internal/linkprofile and counts the bytes crossing it: for MQTT over
// QUIC and HTTP/3 internal/netimpair's UDP relay; for MQTT/TCP and
// MQTT/TLS a userspace TCP relay that shapes the byte stream with the
// profile's delay, jitter and rate, and turns its losses into
// retransmission delays (tcplink.go). A publisher (pub.go) publishes QoS 1
// messages of -size bytes on the edge at -rate, each until the edge
// acknowledges it; a mosquitto_sub (QoS 1) on the upstream records what
// arrives. In the middle of the run the link is cut for -outage: a silent
// blackout (nothing crosses, connections stay open; -tcp-outage close
// closes the TCP connections instead). With -kill-at the edge broker is
// kill -9ed at that time and started again on its store (quiot) or
// persistence file (mosquitto); the publisher reconnects and goes on, and
// a message counts as lost only if the edge acknowledged it.
//
//	go build -o /tmp/quiot ./device
//	go run ./scripts/bridge-bench -quiot /tmp/quiot -link nbiot -duration 10m -outage 60s
//
// It needs mosquitto, mosquitto_pub and mosquitto_sub (Debian's
// mosquitto and mosquitto-clients) and openssl-free Go only.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quiot/quiot/internal/linkprofile"
	"github.com/quiot/quiot/internal/netimpair"
)

var (
	quiotBin = flag.String("quiot", "quiot", "the quiot binary")
	duration = flag.Duration("duration", 2*time.Minute, "publishing time")
	outage   = flag.Duration("outage", 30*time.Second, "link outage in the middle of the run")
	rate     = flag.Float64("rate", 1, "messages per second")
	size     = flag.Int("size", 256, "payload bytes")
	grace    = flag.Duration("grace", 60*time.Second, "wait after the last publish for the last messages")
	only     = flag.String("only", "", "comma-separated variants to run, by number from 1 (default 1 to 6; 7 and 8 are MQTT over QUIC and HTTP/3 with the upstream quiot on the lean QUIC profile)")
	keep     = flag.Bool("keep", false, "keep the working directory (configurations, logs) and print its path")
	linkName = flag.String("link", "", "link profile of internal/linkprofile (lan, nbiot, sat, ...) on every variant's link; empty: loopback unimpaired")
	tcpOut   = flag.String("tcp-outage", "hold", "outage of the TCP link: hold (silent blackout: connections stay open, nothing crosses) or close (connections closed, new ones refused)")
	seed     = flag.Uint64("seed", 1, "seed of the link models")
	killAt   = flag.Duration("kill-at", 0, "kill -9 the edge broker this long after the load starts and restart it on its store (0: no kill)")
)

// profile is the link profile of -link (zero: unimpaired).
var profile linkprofile.Profile

const (
	upUser = "bridge"
	upPass = "bridge-pw"
)

type result struct {
	name                      string
	published, received, dups int
	lost                      int
	// accepted counts the messages the edge acknowledged (PUBACK);
	// notAccepted the others (the publisher gave up on them); retries
	// the publishes the publisher sent again (possible duplicates of its
	// own).
	accepted, notAccepted, retries int
	// killedAt is when the edge was killed (0: not); killErr a failed
	// restart.
	killedAt        time.Duration
	wire            counts
	recovery        time.Duration
	rssKB, maxRSSKB int64
	cpu             time.Duration
	err             error
}

func main() {
	flag.Parse()
	if *linkName != "" {
		p, err := linkprofile.Get(*linkName)
		if err != nil {
			log.Fatal(err)
		}
		profile = p
	}
	if *tcpOut != "hold" && *tcpOut != "close" {
		log.Fatalf("-tcp-outage %q: want hold or close", *tcpOut)
	}
	dir, err := os.MkdirTemp("", "bridge-bench-")
	if err != nil {
		log.Fatal(err)
	}
	if *keep {
		fmt.Println("working directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ca := newPKI(dir)
	variants := []struct {
		name string
		run  func(v *variant) error
	}{
		{"quiot -> mosquitto, MQTT/TLS", func(v *variant) error { return v.quiotToMosquitto(true) }},
		{"quiot -> mosquitto, MQTT/TCP", func(v *variant) error { return v.quiotToMosquitto(false) }},
		{"quiot -> quiot, MQTT over QUIC", func(v *variant) error { return v.quiotToQuiot(false, "default") }},
		{"quiot -> quiot, HTTP/3", func(v *variant) error { return v.quiotToQuiot(true, "default") }},
		{"mosquitto -> mosquitto (bridge), MQTT/TLS", func(v *variant) error { return v.mosquittoToMosquitto(true) }},
		{"mosquitto -> mosquitto (bridge), MQTT/TCP", func(v *variant) error { return v.mosquittoToMosquitto(false) }},
		{"quiot -> quiot (upstream lean), MQTT over QUIC", func(v *variant) error { return v.quiotToQuiot(false, "lean") }},
		{"quiot -> quiot (upstream lean), HTTP/3", func(v *variant) error { return v.quiotToQuiot(true, "lean") }},
	}
	var wg sync.WaitGroup
	results := make([]result, len(variants))
	for i, vr := range variants {
		if *only == "" && i >= 6 || *only != "" && !strings.Contains(","+*only+",", ","+strconv.Itoa(i+1)+",") {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := &variant{name: vr.name, dir: filepath.Join(dir, strconv.Itoa(i)), pki: ca}
			_ = os.MkdirAll(v.dir, 0o700)
			err := vr.run(v)
			v.res.err = err
			v.res.name = vr.name
			v.stopAll()
			results[i] = v.res
		}()
	}
	wg.Wait()
	ln := "loopback, unimpaired"
	if *linkName != "" {
		ln = fmt.Sprintf("%s (up %s, down %s)", *linkName, dirString(profile.Up), dirString(profile.Down))
	}
	fmt.Printf("link: %s; TCP outage mode %s\n", ln, *tcpOut)
	fmt.Printf("load: %.3g msg/s of %d B QoS 1 for %v, link cut for %v from %v", *rate, *size, *duration, *outage, (*duration-*outage)/2)
	if *killAt > 0 {
		fmt.Printf(", edge kill -9ed and restarted at %v", *killAt)
	}
	fmt.Print("\n\n")
	fmt.Println("| variant | published (accepted) | lost | duplicates | wire bytes/msg (up + down) | packets/msg (up + down) | recovery (s) | edge RSS end / max (kB) | edge CPU (s) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		if r.name == "" {
			continue
		}
		if r.err != nil {
			fmt.Printf("| %s | error: %v |\n", r.name, r.err)
			continue
		}
		per := func(b uint64) float64 { return float64(b) / float64(r.published) }
		if r.retries > 0 {
			fmt.Fprintf(os.Stderr, "%s: the publisher sent %d publishes again\n", r.name, r.retries)
		}
		rec := fmt.Sprintf("%.2f", r.recovery.Seconds())
		if r.recovery < 0 {
			rec = "never (lost)"
		}
		w := r.wire
		fmt.Printf("| %s | %d (%d) | %d | %d | %.0f (%.0f + %.0f) | %.2f (%.2f + %.2f) | %s | %d / %d | %.2f |\n", r.name, r.published, r.accepted, r.lost, r.dups,
			per(w.bytesUp+w.bytesDown), per(w.bytesUp), per(w.bytesDown), per(w.pktsUp+w.pktsDown), per(w.pktsUp), per(w.pktsDown),
			rec, r.rssKB, r.maxRSSKB, r.cpu.Seconds())
	}
}

// variant is one edge, upstream and link.
type variant struct {
	name  string
	dir   string
	pki   *pki
	procs []*exec.Cmd
	link  link
	res   result

	// edge is the edge broker's process (replaced by a restart after
	// -kill-at), edgeArgs its command and edgePort its MQTT/TCP port.
	edgeMu   sync.Mutex
	edge     *exec.Cmd
	edgeArgs []string
	edgePort int
	// edgeCPU is the CPU time of the edge processes killed.
	edgeCPU time.Duration
}

// startEdge starts the edge broker (name args...) listening on port.
func (v *variant) startEdge(port int, name string, args ...string) error {
	cmd, err := v.start(name, args...)
	if err != nil {
		return err
	}
	v.edgeMu.Lock()
	v.edge, v.edgeArgs, v.edgePort = cmd, append([]string{name}, args...), port
	v.edgeMu.Unlock()
	return nil
}

func (v *variant) edgePid() int {
	v.edgeMu.Lock()
	defer v.edgeMu.Unlock()
	return v.edge.Process.Pid
}

// killEdge kill -9s the edge broker and starts it again with the same
// command (same configuration, store and persistence directory).
func (v *variant) killEdge() error {
	v.edgeMu.Lock()
	old := v.edge
	args := v.edgeArgs
	v.edgeMu.Unlock()
	cpu := cpuTime(old.Process.Pid)
	if err := old.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 the edge: %w", err)
	}
	_ = old.Wait()
	v.edgeMu.Lock()
	v.edgeCPU += cpu
	v.edgeMu.Unlock()
	if err := v.startEdge(v.edgePort, args[0], args[1:]...); err != nil {
		return fmt.Errorf("restart the edge: %w", err)
	}
	return waitTCP(v.edgePort)
}

// counts are the bytes (headers included) and packets (datagrams or
// segments) that crossed a link each way.
type counts struct{ bytesUp, bytesDown, pktsUp, pktsDown uint64 }

func (c counts) sub(o counts) counts {
	return counts{c.bytesUp - o.bytesUp, c.bytesDown - o.bytesDown, c.pktsUp - o.pktsUp, c.pktsDown - o.pktsDown}
}

// link is the edge -> upstream path with a byte count and a cut.
type link interface {
	addr() string
	cut(on bool)
	count() counts
	close()
}

func (v *variant) start(name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	f, err := os.Create(filepath.Join(v.dir, filepath.Base(name)+"-"+strconv.Itoa(len(v.procs))+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	v.procs = append(v.procs, cmd)
	return cmd, nil
}

func (v *variant) stopAll() {
	for i := len(v.procs) - 1; i >= 0; i-- {
		_ = v.procs[i].Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = v.procs[i].Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = v.procs[i].Process.Kill()
		}
	}
	if v.link != nil {
		v.link.close()
	}
}

// mosquittoUpstream starts a mosquitto with a password, persistence and a
// plain and a TLS listener; it returns their ports.
func (v *variant) mosquittoUpstream() (plain, tlsPort int, err error) {
	plain, tlsPort = freePort(), freePort()
	pw := filepath.Join(v.dir, "passwd")
	if err := os.WriteFile(pw, nil, 0o600); err != nil {
		return 0, 0, err
	}
	if out, err := exec.Command("mosquitto_passwd", "-b", pw, upUser, upPass).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("mosquitto_passwd: %v %s", err, out)
	}
	conf := fmt.Sprintf(`user %s
log_dest stderr
per_listener_settings false
allow_anonymous true
password_file %s
persistence true
persistence_location %s/
listener %d 127.0.0.1
listener %d 127.0.0.1
cafile %s
certfile %s
keyfile %s
`, username(), pw, v.dir, plain, tlsPort, v.pki.caFile, v.pki.certFile, v.pki.keyFile)
	cf := filepath.Join(v.dir, "upstream.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return 0, 0, err
	}
	if _, err := v.start("mosquitto", "-c", cf); err != nil {
		return 0, 0, err
	}
	return plain, tlsPort, waitTCP(plain)
}

func (v *variant) quiotToMosquitto(useTLS bool) error {
	plain, tlsPort, err := v.mosquittoUpstream()
	if err != nil {
		return err
	}
	target := plain
	if useTLS {
		target = tlsPort
	}
	tl, err := newLinkTCP(target)
	if err != nil {
		return err
	}
	v.link = tl
	url, extra := "mqtt://"+tl.addr(), ""
	if useTLS {
		url, extra = "mqtts://localhost:"+strings.Split(tl.addr(), ":")[1], fmt.Sprintf("ca_file = %q\n", v.pki.caFile)
	}
	edgePort, err := v.quiotEdge(url, extra)
	if err != nil {
		return err
	}
	return v.measure(edgePort, plain, []string{"-u", upUser, "-P", upPass})
}

// quiotToQuiot bridges a quiot edge to a quiot upstream over MQTT over
// QUIC, or over HTTP/3 (https://) with h3; the upstream runs QUIC tuning
// profile tuning (the edge's bridge lean).
func (v *variant) quiotToQuiot(h3 bool, tuning string) error {
	quicPort, h3Port, tcpPort := freePort(), freePort(), freePort()
	if _, err := v.start(*quiotBin, "broker", "--tuning", tuning, "--cert", v.pki.certFile, "--key", v.pki.keyFile, "--listen", fmt.Sprintf("127.0.0.1:%d", h3Port),
		"--mqtt-quic", fmt.Sprintf("127.0.0.1:%d", quicPort), "--mqtt-tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort), "--metrics-listen", "", "--log-level", "warn"); err != nil {
		return err
	}
	if err := waitTCP(tcpPort); err != nil {
		return err
	}
	target, scheme := quicPort, "mqtt-quic"
	if h3 {
		target, scheme = h3Port, "https"
	}
	r, err := netimpair.New(netimpair.Options{Upstream: fmt.Sprintf("127.0.0.1:%d", target), Up: profile.Up, Down: profile.Down,
		Seed: *seed, SpinWindow: -1})
	if err != nil {
		return err
	}
	v.link = udpLink{r}
	edgePort, err := v.quiotEdge(fmt.Sprintf("%s://localhost:%d", scheme, r.Addr().Port), fmt.Sprintf("ca_file = %q\ntuning = \"lean\"\n", v.pki.caFile))
	if err != nil {
		return err
	}
	return v.measure(edgePort, tcpPort, nil)
}

// newLinkTCP is the TCP link to port with -link's profile and
// -tcp-outage's mode.
func newLinkTCP(port int) (*tcpLink, error) {
	return newTCPLink(port, profile.Up, profile.Down, profile.RTT(), *tcpOut == "hold", *seed)
}

// dirString describes one direction of a profile.
func dirString(d netimpair.Direction) string {
	s := fmt.Sprintf("delay %v±%v, loss %.3g%%", d.Delay, d.Jitter, d.MeanLossPct())
	if d.RateKbit > 0 {
		s += fmt.Sprintf(", %g kbit/s, queue %d", d.RateKbit, d.QueueLimit)
	}
	return s
}

// quiotEdge starts `quiot broker` with one bridge to url; it returns its
// MQTT/TCP port.
func (v *variant) quiotEdge(url, extra string) (int, error) {
	port := freePort()
	cfg := fmt.Sprintf(`[broker]
dev = true
dev-cert-out = ""
listen = "127.0.0.1:0"
mqtt-quic = ""
mqtt-tcp = "127.0.0.1:%d"
metrics-listen = ""

[[bridge]]
name          = "bench"
url           = %q
out           = ["sensors/#"]
remote_prefix = "site-1/"
qos           = 1
username      = %q
password      = %q
reconnect_min = "1s"
reconnect_max = "5s"
store_dir     = %q
%s`, port, url, upUser, upPass, filepath.Join(v.dir, "store"), extra)
	path := filepath.Join(v.dir, "edge.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return 0, err
	}
	if err := v.startEdge(port, *quiotBin, "broker", "--config", path, "--log-level", "info"); err != nil {
		return 0, err
	}
	return port, waitTCP(port)
}

// mosquittoToMosquitto: mosquitto's own bridge (connection section,
// cleansession false, persistence on) from a mosquitto edge.
func (v *variant) mosquittoToMosquitto(useTLS bool) error {
	plain, tlsPort, err := v.mosquittoUpstream()
	if err != nil {
		return err
	}
	target := plain
	if useTLS {
		target = tlsPort
	}
	tl, err := newLinkTCP(target)
	if err != nil {
		return err
	}
	v.link = tl
	port := freePort()
	edgeDir := filepath.Join(v.dir, "edge")
	_ = os.MkdirAll(edgeDir, 0o700)
	tlsConf := ""
	address := tl.addr()
	if useTLS {
		tlsConf = fmt.Sprintf("bridge_cafile %s\n", v.pki.caFile)
		address = "localhost:" + strings.Split(tl.addr(), ":")[1]
	}
	conf := fmt.Sprintf(`user %s
log_dest stderr
per_listener_settings false
allow_anonymous true
persistence true
persistence_location %s/
autosave_interval 1
listener %d 127.0.0.1

connection bench
address %s
topic sensors/# out 1 "" site-1/
cleansession false
clientid mosquitto-bridge-bench
remote_username %s
remote_password %s
restart_timeout 1 5
%s`, username(), edgeDir, port, address, upUser, upPass, tlsConf)
	cf := filepath.Join(v.dir, "edge.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return err
	}
	if err := v.startEdge(port, "mosquitto", "-c", cf); err != nil {
		return err
	}
	if err := waitTCP(port); err != nil {
		return err
	}
	return v.measure(port, plain, []string{"-u", upUser, "-P", upPass})
}

// measure publishes on the edge's MQTT port and counts on the upstream's.
// With -kill-at the edge is kill -9ed and restarted at that time; only
// the messages the edge acknowledged count (lost: acknowledged, never
// arrived).
func (v *variant) measure(edgePort, upPort int, upAuth []string) error {
	arrivals, sub, err := v.subscribe(upPort, upAuth)
	if err != nil {
		return err
	}
	pub := newPublisher(edgePort)
	defer pub.close()
	line := func(s string) []byte {
		if len(s) < *size {
			s += strings.Repeat("x", *size-len(s))
		}
		return []byte(s)
	}
	if err := warmUp(pub, arrivals, line); err != nil {
		return err
	}
	pub.retries, pub.reconnects = 0, 0
	c0 := v.link.count()
	cpu0 := cpuTime(v.edgePid())

	stopRSS := v.watchRSS()

	seen := map[int]int{}
	var lastAt, firstAt = map[int]time.Time{}, map[int]time.Time{}
	var distinct atomic.Int64
	done := make(chan struct{})
	go func() {
		for a := range arrivals {
			if a.seq < 0 {
				continue
			}
			if seen[a.seq] == 0 {
				distinct.Add(1)
				firstAt[a.seq] = a.at
			}
			seen[a.seq]++
			lastAt[a.seq] = a.at
		}
		close(done)
	}()

	interval := time.Duration(float64(time.Second) / *rate)
	start := time.Now()
	cutAt := start.Add((*duration - *outage) / 2)
	// The link's cut and return, and the kill, run on their own clock:
	// a publish may wait for the edge's restart.
	var backAt time.Time
	backSet := make(chan struct{})
	events := make(chan error, 1)
	go func() {
		time.Sleep(time.Until(cutAt))
		v.link.cut(true)
		time.Sleep(time.Until(cutAt.Add(*outage)))
		v.link.cut(false)
		backAt = time.Now()
		close(backSet)
		if *killAt <= 0 {
			events <- nil
			return
		}
		time.Sleep(time.Until(start.Add(*killAt)))
		v.res.killedAt = time.Since(start)
		events <- v.killEdge()
	}()
	n := int(duration.Seconds() * *rate)
	pubAt := make([]time.Time, n)
	accepted := make([]bool, n)
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		pubAt[i] = time.Now()
		accepted[i] = pub.publish("sensors/bench", line(fmt.Sprintf("%08d ", i)), pubAt[i].Add(30*time.Second))
	}
	if err := <-events; err != nil {
		return err
	}
	<-backSet
	lastBeforeBack := -1
	for i, t := range pubAt {
		if t.Before(backAt) {
			lastBeforeBack = i
		}
	}
	nAccepted := 0
	for _, a := range accepted {
		if a {
			nAccepted++
		}
	}
	// Wait for everything (or the grace time).
	end := time.After(*grace)
	for waiting := true; waiting && distinct.Load() < int64(nAccepted); {
		select {
		case <-end:
			waiting = false
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Late duplicates: one more second.
	time.Sleep(time.Second)
	v.res.rssKB = rssKB(v.edgePid())
	v.edgeMu.Lock()
	v.res.cpu = v.edgeCPU + cpuTime(v.edge.Process.Pid) - cpu0
	v.edgeMu.Unlock()
	v.res.maxRSSKB = stopRSS()
	wire := v.link.count().sub(c0)
	pub.close()
	_ = sub.Process.Signal(syscall.SIGTERM)
	<-done
	v.res.published = n
	v.res.retries = pub.retries
	v.writeArrivals(start, cutAt, backAt, pubAt, firstAt, seen, accepted)
	v.res.wire = wire
	v.tally(accepted, seen)
	v.res.recovery = recovery(accepted, lastAt, lastBeforeBack, backAt)
	return nil
}

// arrival is a message the upstream's subscriber got: its number (-1 a
// warm-up message, -2 the last one) and when.
type arrival struct {
	seq int
	at  time.Time
}

// subscribe starts mosquitto_sub on the upstream's bridged topics; the
// channel carries what it prints and closes when it ends.
func (v *variant) subscribe(upPort int, upAuth []string) (<-chan arrival, *exec.Cmd, error) {
	arrivals := make(chan arrival, 4096)
	subArgs := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(upPort), "-q", "1", "-t", "site-1/sensors/#", "-v", "-c", "-i", "bench-sub"}, upAuth...)
	sub := exec.Command("mosquitto_sub", subArgs...)
	out, err := sub.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := sub.Start(); err != nil {
		return nil, nil, err
	}
	v.procs = append(v.procs, sub)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			_, payload, _ := strings.Cut(sc.Text(), " ")
			if strings.HasPrefix(payload, "warmlast") {
				arrivals <- arrival{seq: -2, at: time.Now()}
				continue
			}
			if strings.HasPrefix(payload, "warm") {
				arrivals <- arrival{seq: -1, at: time.Now()}
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(payload[:min(8, len(payload))]))
			if err == nil {
				arrivals <- arrival{seq: n, at: time.Now()}
			}
		}
		close(arrivals)
	}()
	return arrivals, sub, nil
}

// watchRSS samples the edge's RSS every 500 ms until the returned
// function is called, which returns the largest sample (kB).
func (v *variant) watchRSS() (stop func() int64) {
	var maxRSS atomic.Int64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			if r := rssKB(v.edgePid()); r > maxRSS.Load() {
				maxRSS.Store(r)
			}
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	}()
	return func() int64 {
		close(done)
		return maxRSS.Load()
	}
}

// warmUp publishes until the bridge carries a message, then a last
// warm-up message, and returns once that arrived (the bridge's queue is
// empty: it goes up in order) and late duplicates were drained.
func warmUp(pub *publisher, arrivals <-chan arrival, line func(string) []byte) error {
	// Warm up: the bridge is connected once a message goes through (the
	// subscriber may come after the first ones); the load starts once a
	// last warm-up message published after that arrived (the bridge's
	// queue is empty: it goes up in order).
	warm := time.NewTicker(time.Second)
	deadline := time.After(120 * time.Second)
	for got := false; !got; {
		if !pub.publish("sensors/bench", line("warm "), time.Now().Add(10*time.Second)) {
			return fmt.Errorf("the edge accepted no warm-up message")
		}
		select {
		case a := <-arrivals:
			got = a.seq == -1
		case <-warm.C:
		case <-deadline:
			return fmt.Errorf("no message through the bridge in 120s")
		}
	}
	warm.Stop()
	if !pub.publish("sensors/bench", line("warmlast "), time.Now().Add(10*time.Second)) {
		return fmt.Errorf("the edge accepted no warm-up message")
	}
	for got := false; !got; {
		select {
		case a := <-arrivals:
			got = a.seq == -2
		case <-deadline:
			return fmt.Errorf("the last warm-up message not through the bridge in 120s")
		}
	}
	time.Sleep(2 * time.Second) // late duplicates
	for len(arrivals) > 0 {
		<-arrivals
	}
	return nil
}

// tally counts the published messages into the result: accepted or not,
// received, lost (accepted, never arrived) and duplicates.
func (v *variant) tally(accepted []bool, seen map[int]int) {
	for i := range accepted {
		c := seen[i]
		if accepted[i] {
			v.res.accepted++
		} else {
			v.res.notAccepted++
		}
		switch {
		case c == 0 && accepted[i]:
			v.res.lost++
		case c > 0:
			v.res.received++
			v.res.dups += c - 1
		}
	}
}

// recovery is the time from the link's return to the last arrival of a
// message published before it; -1 when one accepted never arrived.
func recovery(accepted []bool, lastAt map[int]time.Time, lastBeforeBack int, backAt time.Time) time.Duration {
	var last time.Time
	for i := 0; i <= lastBeforeBack; i++ {
		t, ok := lastAt[i]
		if !ok {
			if !accepted[i] {
				continue
			}
			// a message queued during the outage never arrived
			return -1
		}
		if t.After(last) {
			last = t
		}
	}
	if last.After(backAt) {
		return last.Sub(backAt)
	}
	return 0
}

// writeArrivals writes arrivals.csv in the variant's directory: each
// message's publish time, first arrival, copies and whether the edge
// accepted it, in seconds from the start of the load.
func (v *variant) writeArrivals(start, cutAt, backAt time.Time, pubAt []time.Time, firstAt map[int]time.Time, seen map[int]int, accepted []bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "# cut %.3f back %.3f", cutAt.Sub(start).Seconds(), backAt.Sub(start).Seconds())
	if v.res.killedAt > 0 {
		fmt.Fprintf(&b, " kill %.3f", v.res.killedAt.Seconds())
	}
	b.WriteString("\nseq,published,arrived,copies,accepted\n")
	for i, p := range pubAt {
		arr := ""
		if t, ok := firstAt[i]; ok {
			arr = fmt.Sprintf("%.3f", t.Sub(start).Seconds())
		}
		acc := 0
		if accepted[i] {
			acc = 1
		}
		fmt.Fprintf(&b, "%d,%.3f,%s,%d,%d\n", i, p.Sub(start).Seconds(), arr, seen[i], acc)
	}
	_ = os.WriteFile(filepath.Join(v.dir, "arrivals.csv"), []byte(b.String()), 0o600)
}

type udpLink struct{ r *netimpair.Relay }

func (u udpLink) addr() string { return u.r.Addr().String() }
func (u udpLink) cut(on bool)  { u.r.SetBlackout(on) }
func (u udpLink) close()       { _ = u.r.Close() }

// bytes counts what crossed each way: the UDP payload delivered plus 28 B
// of IPv4 and UDP header per datagram.
func (u udpLink) count() counts {
	s := u.r.Stats()
	return counts{s.Up.ForwardedBytes + udpHeader*s.Up.Forwarded, s.Down.ForwardedBytes + udpHeader*s.Down.Forwarded, s.Up.Forwarded, s.Down.Forwarded}
}

// udpHeader is the IPv4 + UDP header per datagram.
const udpHeader = 28

func username() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "mosquitto"
}

// ports are the loopback ports handed out for the variants' brokers and
// links. A port the kernel picked for a listener on :0, closed again, goes
// to the next socket that asks for one (a variant's client, or another
// variant starting at the same time), which then held the port a broker
// was about to listen on. So ports are drawn below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range starts at 32768 by default), free
// for both TCP and UDP when drawn (quiot's broker listens on both), and
// never handed out twice in a run.
var ports struct {
	sync.Mutex
	given map[int]bool
}

// freePort returns a loopback port free for TCP and UDP.
func freePort() int {
	const lo, n = 20000, 12000
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	for range 1000 {
		p := lo + mrand.IntN(n)
		if ports.given[p] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		c, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = c.Close()
		ports.given[p] = true
		return p
	}
	log.Fatalf("no free loopback port in %d-%d", lo, lo+n-1)
	return 0
}

func waitTCP(port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("port %d never opened", port)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rssKB is VmRSS of pid, from /proc.
func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// cpuTime is utime+stime of pid, from /proc (USER_HZ 100).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// pki is a CA and a server certificate for localhost and 127.0.0.1.
type pki struct{ caFile, certFile, keyFile string }

func newPKI(dir string) *pki {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	p := &pki{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	for f, b := range map[string][]byte{
		p.caFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		p.certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		p.keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	} {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	return p
}
