//go:build linux

package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/probe/netns"
	"github.com/quiot/quiot/probe/netns/netnstest"
)

// The NAT lab: a device behind a NAT router (nftables masquerade) and a
// broker beyond it, each in a network namespace of its own, with documentation
// addresses only (RFC 5737):
//
//	[device: dev 198.51.100.10/24] -- [nat: in 198.51.100.1/24, out 203.0.113.1/24, masquerade] -- [broker: 203.0.113.2/24]
const (
	labDevAddr   = "198.51.100.10"
	labDevAddr2  = "198.51.100.11" // the device's address after the change
	labNATInside = "198.51.100.1"
	labNATOut    = "203.0.113.1"
	labBroker    = "203.0.113.2"
	labH3Port    = 4433
	labMQTTPort  = 14567
	// The masquerade's source port ranges: before and after a rebinding.
	labPorts1 = "20000-20999"
	labPorts2 = "21000-21999"
)

type natLab struct {
	devNS, natNS, brkNS string
	devIf, natOut       string
	pki                 *testutil.PKI
	cert                tls.Certificate
}

// newNATLab builds the three namespaces and the NAT and removes them when t
// ends, also when it fails.
func newNATLab(t *testing.T) *natLab {
	t.Helper()
	netnstest.NeedRoot(t, "nft", "conntrack", "sysctl")
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	sfx := hex.EncodeToString(b[:])
	l := &natLab{
		devNS: "qmd" + sfx, natNS: "qmn" + sfx, brkNS: "qmb" + sfx,
		devIf: "qmd" + sfx, natOut: "qmo" + sfx,
	}
	topo := &netns.Topology{}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("tear down the NAT lab: %v", err)
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{l.devNS, l.natNS, l.brkNS} {
		must(topo.AddNS(ns))
	}
	natIn, brkIf := "qmi"+sfx, "qmb"+sfx
	must(topo.Veth(l.devIf, "", l.devNS, natIn, "", l.natNS))
	must(topo.Veth(l.natOut, "", l.natNS, brkIf, "", l.brkNS))
	// Removing the device's first address must not take the second one
	// with it (the address change below).
	must(nsExec(l.devNS, "sysctl", "-q", "-w", "net.ipv4.conf.all.promote_secondaries=1", "net.ipv4.conf."+l.devIf+".promote_secondaries=1"))
	must(topo.Addr(l.devNS, l.devIf, labDevAddr+"/24"))
	must(topo.Addr(l.natNS, natIn, labNATInside+"/24"))
	must(topo.Addr(l.natNS, l.natOut, labNATOut+"/24"))
	must(topo.Addr(l.brkNS, brkIf, labBroker+"/24"))
	must(netns.IP("-n", l.devNS, "route", "add", "default", "via", labNATInside))
	must(nsExec(l.natNS, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
	must(l.masquerade(labPorts1))

	l.pki = testutil.NewPKI(t)
	srv, err := l.pki.CA.Issue("localhost", &certs.Options{Hosts: []string{"localhost", labBroker}})
	must(err)
	l.cert = srv.TLS
	return l
}

func nsExec(ns string, args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), ns, err, bytes.TrimSpace(out))
	}
	return nil
}

func nsOutput(ns string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), ns, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// masquerade (re)writes the NAT's only rule: UDP leaving the outside
// interface is masqueraded to a source port in ports.
func (l *natLab) masquerade(ports string) error {
	cmd := exec.Command("ip", "netns", "exec", l.natNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`table ip quiotnat {}
delete table ip quiotnat
table ip quiotnat {
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		oifname %q meta l4proto udp masquerade to :%s
	}
}
`, l.natOut, ports))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft masquerade to :%s: %w: %s", ports, err, bytes.TrimSpace(out))
	}
	return nil
}

// rebind makes the NAT give every flow a new source port: the masquerade
// moves to the second port range and its mappings are flushed, so the next
// datagram of each flow creates a new one (a carrier NAT that dropped an
// idle mapping, or restarted).
func (l *natLab) rebind(t *testing.T) {
	t.Helper()
	if err := l.masquerade(labPorts2); err != nil {
		t.Fatal(err)
	}
	if err := nsExec(l.natNS, "conntrack", "-D", "-p", "udp"); err != nil && !strings.Contains(err.Error(), "0 flow entries") {
		t.Fatal(err)
	}
}

// changeAddress gives the device a new address and removes the old one
// (make before break: a handover to another cell or network).
func (l *natLab) changeAddress(t *testing.T) {
	t.Helper()
	if err := netns.IP("-n", l.devNS, "addr", "add", labDevAddr2+"/24", "dev", l.devIf); err != nil {
		t.Fatal(err)
	}
	if err := netns.IP("-n", l.devNS, "addr", "del", labDevAddr+"/24", "dev", l.devIf); err != nil {
		t.Fatal(err)
	}
	if err := netns.IP("-n", l.devNS, "route", "replace", "default", "via", labNATInside); err != nil {
		t.Fatal(err)
	}
}

// dropAddress removes the device's only address (and with it its routes):
// break before make, a handover whose new address comes later.
func (l *natLab) dropAddress(t *testing.T) {
	t.Helper()
	if err := netns.IP("-n", l.devNS, "addr", "del", labDevAddr+"/24", "dev", l.devIf); err != nil {
		t.Fatal(err)
	}
}

// newAddress gives the device its new address and default route back.
func (l *natLab) newAddress(t *testing.T) {
	t.Helper()
	if err := netns.IP("-n", l.devNS, "addr", "add", labDevAddr2+"/24", "dev", l.devIf); err != nil {
		t.Fatal(err)
	}
	if err := netns.IP("-n", l.devNS, "route", "replace", "default", "via", labNATInside); err != nil {
		t.Fatal(err)
	}
}

// flows returns the NAT's UDP conntrack entries, one a line.
func (l *natLab) flows(t *testing.T) string {
	t.Helper()
	out, err := nsOutput(l.natNS, "conntrack", "-L", "-p", "udp")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// udp opens a UDP socket in namespace ns.
func udpIn(t *testing.T, ns, addr string) *net.UDPConn {
	t.Helper()
	var pc *net.UDPConn
	err := netns.Do(ns, func() error {
		ua, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			return err
		}
		pc, err = net.ListenUDP("udp4", ua)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

// startBrokers starts the HTTP/3 broker and the MQTT over QUIC broker, both
// on sockets in the broker's namespace, and returns their client URLs.
func (l *natLab) startBrokers(t *testing.T) (h3URL, mqttURL string) {
	t.Helper()
	b, err := broker.New(&broker.Options{
		PacketConn:   udpIn(t, l.brkNS, net.JoinHostPort(labBroker, strconv.Itoa(labH3Port))),
		DisableTCP:   true,
		Certificates: []tls.Certificate{l.cert},
		Auth:         auth.Open(), // the device is not on loopback
		Logger:       testutil.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	s, err := mqttquic.New(mqttquic.Options{
		PacketConn: udpIn(t, l.brkNS, net.JoinHostPort(labBroker, strconv.Itoa(labMQTTPort))),
		TLS:        &tls.Config{Certificates: []tls.Certificate{l.cert}},
		Logger:     testutil.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return fmt.Sprintf("https://%s:%d", labBroker, labH3Port), fmt.Sprintf("mqtt-quic://%s:%d", labBroker, labMQTTPort)
}

// labProfile is the clients' profile: lean, with a 1 s keep-alive for a
// NAT rebinding. A device that only receives (the subscriber) sends nothing
// after its NAT mapping is gone until its next keep-alive PING, which
// creates the new mapping the broker then migrates to; the short period
// keeps the test fast. An address change needs no keep-alive: the client
// sees it and migrates at once (migrate.go), which the address cases check
// with lean's own 25 s keep-alive (docs/TUNING.md, "NAT bindings and
// connection migration").
func labProfile(event string) *quictune.Profile {
	p := quictune.Lean()
	if event == "rebind" {
		p.KeepAlivePeriod = quictune.Duration(time.Second)
	}
	return p
}

// logWatch is a slog handler that signals the first record whose message
// starts with one of its prefixes.
type logWatch struct {
	prefixes []string
	to       string // when set, the record's "to" attribute must be this
	seen     chan struct{}
	once     *sync.Once
	mu       *sync.Mutex
	first    *string
}

func newLogWatch(prefixes ...string) *logWatch {
	return &logWatch{prefixes: prefixes, seen: make(chan struct{}), once: &sync.Once{}, mu: &sync.Mutex{}, first: new(string)}
}

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatch) WithGroup(string) slog.Handler            { return w }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	if w.to != "" {
		to := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "to" {
				to = a.Value.String()
			}
			return true
		})
		if to != w.to {
			return nil
		}
	}
	for _, p := range w.prefixes {
		if strings.HasPrefix(r.Message, p) {
			w.once.Do(func() {
				w.mu.Lock()
				*w.first = r.Message
				w.mu.Unlock()
				close(w.seen)
			})
		}
	}
	return nil
}

// recorder collects a subscriber's numbered messages.
type recorder struct {
	mu     sync.Mutex
	got    []int
	warm   bool
	change chan struct{} // gets a value after every message
}

func (r *recorder) handle(m client.Message) {
	r.mu.Lock()
	if s, ok := strings.CutPrefix(string(m.Payload), "n="); ok {
		n, _ := strconv.Atoi(s)
		r.got = append(r.got, n)
	} else {
		r.warm = true
	}
	r.mu.Unlock()
	select {
	case r.change <- struct{}{}:
	default:
	}
}

// wait blocks until cond (under the lock) holds or the deadline passes.
func (r *recorder) wait(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		n := len(r.got)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.change:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s (%d numbered messages received)", d, what, n)
		}
	}
}

// TestMigrationBehindNAT runs a publisher and a subscriber (each with its
// own socket) in the device's namespace, behind the NAT, sending a steady 20
// messages a second through the broker; mid-stream the NAT's mappings are
// flushed onto new source ports (rebind), the device gets a new address
// before losing the old one (address), or loses it before the new one
// comes (address-gap). Both clients must keep their QUIC connection (zero
// reconnects), and the subscriber must receive every message once, in
// order; on an address change the subscriber must probe the broker from
// its new address by itself (migrate.go) rather than wait for its
// keep-alive.
func TestMigrationBehindNAT(t *testing.T) {
	tests := []struct {
		proto, event string
	}{
		{"h3", "rebind"},
		{"h3", "address"},
		{"h3", "address-gap"},
		{"mqtt", "rebind"},
		{"mqtt", "address"},
		{"mqtt", "address-gap"},
	}
	for _, tt := range tests {
		t.Run(tt.proto+"-"+tt.event, func(t *testing.T) {
			l := newNATLab(t)
			h3URL, mqttURL := l.startBrokers(t)
			url := h3URL
			if tt.proto == "mqtt" {
				url = mqttURL
			}
			// The publisher's first word on a send that found no
			// route: "network down" (netdown.go) while it keeps its
			// connection, or the lines of a lost connection.
			pubDown := newLogWatch("network down", "retrying", "mqtt connection lost", "broker request failed")
			newClient := func(name string, log *slog.Logger) client.Client {
				c, err := client.New(client.Options{
					Broker:     url,
					RootCAs:    l.pki.Pool(),
					Tuning:     labProfile(tt.event),
					PacketConn: udpIn(t, l.devNS, "0.0.0.0:0"),
					Reconnect:  true,
					ClientID:   name,
					Logger:     log,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			// The subscriber's word that it saw the device's new address
			// and sent from it at once (migrate.go).
			subMoved := newLogWatch("local address changed; probing the broker from the new address")
			subMoved.to = labDevAddr2
			sub, pub := newClient("lab-sub", slog.New(subMoved)), newClient("lab-pub", slog.New(pubDown))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			rec := &recorder{change: make(chan struct{}, 1)}
			subDone := make(chan error, 1)
			go func() { subDone <- sub.Subscribe(ctx, "lab/#", 0, rec.handle) }()
			// Warm up until the subscription delivers.
			warmCtx, warmCancel := context.WithTimeout(ctx, 20*time.Second)
			defer warmCancel()
			for {
				if _, err := pub.Publish(warmCtx, "lab/warm", []byte("w"), client.PublishOptions{QoS: 1}); err != nil {
					t.Fatalf("warm-up publish: %v", err)
				}
				r := false
				select {
				case <-rec.change:
					rec.mu.Lock()
					r = rec.warm
					rec.mu.Unlock()
				case <-time.After(200 * time.Millisecond): // the next warm-up message, not a wait for an event
				case err := <-subDone:
					t.Fatalf("subscribe ended: %v", err)
				}
				if r {
					break
				}
			}

			// The steady stream: 20 messages a second, QoS 1.
			var (
				pubMu   sync.Mutex
				pubbed  int
				pubErr  error
				stopPub = make(chan struct{})
				pubDone = make(chan struct{})
			)
			go func() {
				defer close(pubDone)
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for n := 1; ; n++ {
					select {
					case <-stopPub:
						return
					case <-tick.C:
					}
					pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
					_, err := pub.Publish(pctx, "lab/n", []byte("n="+strconv.Itoa(n)), client.PublishOptions{QoS: 1})
					pcancel()
					pubMu.Lock()
					if err != nil {
						pubErr = err
					} else {
						pubbed = n
					}
					pubMu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			rec.wait(t, "20 messages before the event", 20*time.Second, func() bool { return len(rec.got) >= 20 })

			before := l.flows(t)
			switch tt.event {
			case "rebind":
				l.rebind(t)
			case "address":
				l.changeAddress(t)
			case "address-gap":
				// The publisher sends into the gap (20 messages a
				// second) and finds no route; then the new address
				// comes.
				l.dropAddress(t)
				select {
				case <-pubDown.seen:
				case <-time.After(10 * time.Second):
					t.Fatal("the publisher logged no failed send within 10 s of the address's removal")
				}
				l.newAddress(t)
				pubDown.mu.Lock()
				t.Logf("publisher during the gap: %q", *pubDown.first)
				pubDown.mu.Unlock()
			}
			if tt.event != "rebind" {
				select {
				case <-subMoved.seen:
				case <-time.After(20 * time.Second):
					t.Fatalf("the subscriber did not probe the broker from %s within 20 s", labDevAddr2)
				}
			}
			evAt := time.Now()
			pubMu.Lock()
			atEvent := pubbed
			pubMu.Unlock()
			rec.wait(t, "40 messages after the event", 60*time.Second, func() bool {
				return len(rec.got) >= atEvent+40
			})
			after := l.flows(t)
			t.Logf("recovered in %v", time.Since(evAt))
			close(stopPub)
			<-pubDone
			pubMu.Lock()
			total, perr := pubbed, pubErr
			pubMu.Unlock()
			if perr != nil {
				t.Fatalf("publish after %d messages: %v", total, perr)
			}
			rec.wait(t, fmt.Sprintf("all %d messages", total), 20*time.Second, func() bool { return len(rec.got) >= total })

			// The event took effect: new mappings on the NAT.
			switch tt.event {
			case "rebind":
				if !strings.Contains(after, "dport=21") {
					t.Errorf("no NAT mapping in %s after the rebinding:\n%s", labPorts2, after)
				}
			case "address", "address-gap":
				if !strings.Contains(after, "src="+labDevAddr2) {
					t.Errorf("no NAT mapping from %s after the address change:\n%s", labDevAddr2, after)
				}
			}
			rec.mu.Lock()
			got := append([]int(nil), rec.got...)
			rec.mu.Unlock()
			for i, n := range got {
				if n != i+1 {
					t.Fatalf("message %d is n=%d (lost, duplicated or out of order); received %v", i+1, n, got)
				}
			}
			if len(got) != total {
				t.Fatalf("received %d messages, published %d", len(got), total)
			}
			sr, pr := sub.Stats().Reconnects, pub.Stats().Reconnects
			t.Logf("%s %s: %d messages (event after %d), reconnects: subscriber %d, publisher %d\nNAT before:\n%sNAT after:\n%s",
				tt.proto, tt.event, total, atEvent, sr, pr, before, after)
			if sr != 0 || pr != 0 {
				t.Errorf("reconnects: subscriber %d, publisher %d; want none (the connection migrates)", sr, pr)
			}
		})
	}
}

// probeLog counts a client's probe outcomes after an address change
// (migrate.go) and signals each.
type probeLog struct {
	mu        sync.Mutex
	validated int
	outcome   chan string
}

func (h *probeLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *probeLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *probeLog) WithGroup(string) slog.Handler            { return h }
func (h *probeLog) Handle(_ context.Context, r slog.Record) error {
	switch {
	case strings.HasPrefix(r.Message, "local address changed; the broker validated"),
		strings.HasPrefix(r.Message, "local address changed; the broker already follows"):
		h.mu.Lock()
		h.validated++
		h.mu.Unlock()
	case strings.HasPrefix(r.Message, "new path not validated"), strings.HasPrefix(r.Message, "local address changed; no migration"):
	default:
		return nil
	}
	h.outcome <- r.Message
	return nil
}

// TestMigrationRepeated: six address changes in a row on one connection,
// each probed and validated by the broker (or followed by it before the
// probe: a fresh-clone make test saw the second change's probe go
// unanswered that way) (every probe takes one of the
// broker's connection IDs, which closing the path gives back), and the
// connection still publishes after each.
func TestMigrationRepeated(t *testing.T) {
	for _, proto := range []string{"h3", "mqtt"} {
		t.Run(proto, func(t *testing.T) {
			l := newNATLab(t)
			h3URL, mqttURL := l.startBrokers(t)
			url := h3URL
			if proto == "mqtt" {
				url = mqttURL
			}
			h := &probeLog{outcome: make(chan string, 16)}
			c, err := client.New(client.Options{
				Broker:     url,
				RootCAs:    l.pki.Pool(),
				Tuning:     labProfile("address"),
				PacketConn: udpIn(t, l.devNS, "0.0.0.0:0"),
				Reconnect:  true,
				Logger:     slog.New(h),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			if _, err := c.Publish(ctx, "lab/r", []byte("0"), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
			addrs := []string{labDevAddr, labDevAddr2}
			const changes = 6
			for i := range changes {
				from, to := addrs[i%2], addrs[(i+1)%2]
				for _, args := range [][]string{
					{"addr", "add", to + "/24", "dev", l.devIf},
					{"addr", "del", from + "/24", "dev", l.devIf},
					{"route", "replace", "default", "via", labNATInside},
				} {
					if err := netns.IP(append([]string{"-n", l.devNS}, args...)...); err != nil {
						t.Fatal(err)
					}
				}
				select {
				case m := <-h.outcome:
					// Validated by the probe, or the probe unanswered
					// because the device's own packets from the new address
					// reached the broker first (quic-go answers a challenge
					// only from another address): both are the connection
					// at its new address.
					if !strings.Contains(m, "validated the new address") && !strings.Contains(m, "already follows the new address") {
						t.Fatalf("address change %d (%s -> %s): %s", i+1, from, to, m)
					}
				case <-ctx.Done():
					t.Fatalf("address change %d (%s -> %s): no probe outcome", i+1, from, to)
				}
				if _, err := c.Publish(ctx, "lab/r", []byte(strconv.Itoa(i+1)), client.PublishOptions{QoS: 1}); err != nil {
					t.Fatalf("publish after address change %d: %v", i+1, err)
				}
			}
			h.mu.Lock()
			v := h.validated
			h.mu.Unlock()
			if r := c.Stats().Reconnects; r != 0 || v != changes {
				t.Fatalf("%d of %d address changes validated or followed, %d reconnects; want all, none", v, changes, r)
			}
		})
	}
}
