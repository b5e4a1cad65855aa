package bridge_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/internal/testutil"
)

// Debian's mosquitto (package mosquitto, /usr/sbin/mosquitto) as the
// upstream of a bridge, started by the test on loopback: a plain listener
// and a TLS one (certificate of the test PKI), both with a password file
// made by mosquitto_passwd and no anonymous access.

const (
	upUser = "edge-1"
	upPass = "s3cret-edge"
)

type mosquitto struct {
	t       *testing.T
	bin     string
	dir     string
	conf    string
	port    string // plain MQTT
	tlsPort string // MQTT over TLS
	caFile  string
	persist bool
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stderr  *testutil.SyncBuffer
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// startMosquitto writes the configuration and starts mosquitto; persist
// keeps sessions and queued messages across a restart (SIGTERM saves them).
func startMosquitto(t *testing.T, pki *testutil.PKI, persist bool) *mosquitto {
	t.Helper()
	return startMosquittoACL(t, pki, persist, "")
}

// startMosquittoACL is startMosquitto with an ACL file's content (empty:
// none, every user may do everything).
func startMosquittoACL(t *testing.T, pki *testutil.PKI, persist bool, acl string) *mosquitto {
	t.Helper()
	bin := testenv.RequireTool(t, "mosquitto")
	passwd := testenv.RequireTool(t, "mosquitto_passwd")
	dir := t.TempDir()
	m := &mosquitto{t: t, bin: bin, dir: dir, port: freePort(t), tlsPort: freePort(t), persist: persist}
	pwFile := filepath.Join(dir, "passwd")
	if out, err := exec.Command(passwd, "-c", "-b", pwFile, upUser, upPass).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v: %s", err, out)
	}
	m.caFile = filepath.Join(dir, "ca.pem")
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for f, b := range map[string][]byte{m.caFile: pki.CA.CertPEM(), certFile: pki.Server.CertPEM, keyFile: pki.Server.KeyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var conf strings.Builder
	if u, err := user.Current(); err == nil {
		fmt.Fprintf(&conf, "user %s\n", u.Username) // as root, mosquitto would switch to user mosquitto, who cannot read the test's files
	}
	fmt.Fprintf(&conf, "per_listener_settings false\nallow_anonymous false\npassword_file %s\n", pwFile)
	fmt.Fprintf(&conf, "log_dest stderr\nlog_type error\nlog_type warning\nlog_type notice\nlog_type information\nconnection_messages true\n")
	if acl != "" {
		aclFile := filepath.Join(dir, "acl")
		if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&conf, "acl_file %s\n", aclFile)
	}
	if persist {
		fmt.Fprintf(&conf, "persistence true\npersistence_location %s/\nautosave_interval 0\n", dir)
	} else {
		conf.WriteString("persistence false\n")
	}
	fmt.Fprintf(&conf, "listener %s 127.0.0.1\n", m.port)
	fmt.Fprintf(&conf, "listener %s 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n", m.tlsPort, m.caFile, certFile, keyFile)
	m.conf = filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(m.conf, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(m.stop)
	return m
}

// start runs mosquitto and waits for its "running" line.
func (m *mosquitto) start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(m.bin, "-c", m.conf)
	pr, pw, err := os.Pipe()
	if err != nil {
		m.t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("start mosquitto: %v", err)
	}
	_ = pw.Close()
	m.cmd = cmd
	m.exited = make(chan struct{})
	m.stderr = &testutil.SyncBuffer{}
	running := make(chan struct{})
	log := m.stderr
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(log, line)
			if strings.Contains(line, " running") {
				once.Do(func() { close(running) })
			}
		}
	}()
	exited := m.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-running:
	case <-exited:
		m.t.Fatalf("mosquitto exited at start: %s", log.String())
	case <-time.After(15 * time.Second):
		m.t.Fatalf("mosquitto did not say it runs within 15s: %s", log.String())
	}
}

// stop ends mosquitto with SIGTERM (it saves its persistence file) and
// waits for it.
func (m *mosquitto) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	if m.t.Failed() {
		m.t.Logf("mosquitto log:\n%s", m.stderr.String())
	}
	m.cmd = nil
}

// sub is a mosquitto_sub on the upstream printing "topic payload" lines.
type sub struct {
	lines    chan string
	subacked chan struct{}
	errb     *testutil.SyncBuffer
}

// mosquittoSub starts mosquitto_sub on filter (plain listener, with the
// password; extra arguments appended) and waits for its SUBACK.
func (m *mosquitto) sub(ctx context.Context, t *testing.T, filter string, extra ...string) *sub {
	t.Helper()
	return mosquittoSub(ctx, t, append([]string{"-p", m.port, "-u", upUser, "-P", upPass, "-t", filter}, extra...)...)
}

// mosquittoSub starts mosquitto_sub on 127.0.0.1 with args (port, filter,
// credentials) and waits for its SUBACK.
func mosquittoSub(ctx context.Context, t *testing.T, args ...string) *sub {
	t.Helper()
	bin := testenv.RequireTool(t, "mosquitto_sub")
	// stdbuf: mosquitto_sub's debug lines (the SUBACK) are block-buffered
	// on a pipe.
	stdbuf := testenv.RequireTool(t, "stdbuf")
	args = append([]string{"-oL", bin, "-h", "127.0.0.1", "-v", "-d", "-q", "1"}, args...)
	cmd := exec.CommandContext(ctx, stdbuf, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &sub{lines: make(chan string, 4096), subacked: make(chan struct{}), errb: &testutil.SyncBuffer{}}
	cmd.Stderr = s.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, "Client ") || strings.HasPrefix(l, "Subscribed (mid") {
				if strings.Contains(l, "received SUBACK") {
					once.Do(func() { close(s.subacked) })
				}
				continue
			}
			s.lines <- l
		}
	}()
	select {
	case <-s.subacked:
	case <-ctx.Done():
		t.Fatalf("mosquitto_sub %s: no SUBACK: %s", strings.Join(args, " "), s.errb.String())
	}
	return s
}

// next returns the next message line, failing the test at ctx's end.
func (s *sub) next(ctx context.Context, t *testing.T, what string) string {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			t.Fatalf("mosquitto_sub ended while waiting for %s: %s", what, s.errb.String())
		}
		return l
	case <-ctx.Done():
		t.Fatalf("mosquitto_sub: no %s in time", what)
	}
	return ""
}

// pub runs mosquitto_pub on the plain listener.
func (m *mosquitto) pub(t *testing.T, args ...string) {
	t.Helper()
	mosquittoPub(t, append([]string{"-p", m.port, "-u", upUser, "-P", upPass}, args...)...)
}

// mosquittoPub runs mosquitto_pub (MQTT 5) on 127.0.0.1 with args.
func mosquittoPub(t *testing.T, args ...string) {
	t.Helper()
	bin := testenv.RequireTool(t, "mosquitto_pub")
	a := append([]string{"-h", "127.0.0.1", "-V", "mqttv5"}, args...)
	if out, err := exec.Command(bin, a...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
