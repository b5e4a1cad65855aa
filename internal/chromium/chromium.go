// Package chromium runs Debian's headless Chromium for tests and drives it
// over the DevTools protocol (a small client on golang.org/x/net/websocket):
// open a page, evaluate JavaScript, wait for a condition, take a
// screenshot, and collect console errors and uncaught exceptions.
//
// Start gates the test on the chromium binary (internal/testenv), gives the
// browser a throwaway profile directory, and kills the browser's process
// group and removes the profile at the end of the test, also on failure.
// Only tests import this package.
package chromium

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/quiot/quiot/internal/testenv"
)

// Options configure the browser.
type Options struct {
	// Args are extra command-line flags (e.g. --origin-to-force-quic-on).
	Args []string
	// TrustCert, when set, is a server certificate whose public key the
	// browser accepts without a chain to a known root, for TCP and QUIC
	// (--ignore-certificate-errors-spki-list).
	TrustCert *x509.Certificate
	// Width and Height are the window size; zero means 1280x900.
	Width, Height int
}

// SPKIHash is the base64 SHA-256 of a certificate's public key, the form
// --ignore-certificate-errors-spki-list wants.
func SPKIHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Browser is a running headless Chromium.
type Browser struct {
	t   testing.TB
	cmd *exec.Cmd
	ws  *websocket.Conn

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	pages   map[string]*Page // by session id
	closed  bool
	readErr error
}

type reply struct {
	Result json.RawMessage
	Err    *cdpError
}

type cdpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    string `json:"data"`
}

func (e *cdpError) Error() string {
	return fmt.Sprintf("devtools: %s (%d) %s", e.Message, e.Code, e.Data)
}

// message is any DevTools message.
type message struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *cdpError       `json:"error,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

// Start launches headless Chromium and connects to it. The test is
// skipped (failed under CI) when chromium is not installed.
func Start(t testing.TB, opts Options) *Browser {
	t.Helper()
	bin := testenv.RequireTool(t, "chromium")
	dir, err := os.MkdirTemp("", "quiot-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	w, h := opts.Width, opts.Height
	if w == 0 {
		w, h = 1280, 900
	}
	args := []string{
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir=" + dir, "--remote-debugging-port=0", "--remote-allow-origins=*",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-features=Translate,MediaRouter,OptimizationHints", "--metrics-recording-only",
		"--password-store=basic", "--use-mock-keychain", "--mute-audio", "--hide-scrollbars",
		fmt.Sprintf("--window-size=%d,%d", w, h), "--enable-quic",
	}
	if opts.TrustCert != nil {
		args = append(args, "--ignore-certificate-errors-spki-list="+SPKIHash(opts.TrustCert))
	}
	args = append(args, opts.Args...)
	args = append(args, "about:blank")
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	b := &Browser{t: t, cmd: cmd, pending: map[int64]chan reply{}, pages: map[string]*Page{}}
	t.Cleanup(b.kill)

	// The browser announces its DevTools endpoint on stderr.
	wsURL := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if log.Len() < 64<<10 {
				log.WriteString(line + "\n")
			}
			logMu.Unlock()
			if u, ok := strings.CutPrefix(line, "DevTools listening on "); ok && !sent {
				wsURL <- strings.TrimSpace(u)
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var u string
	select {
	case u = <-wsURL:
	case <-time.After(30 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("chromium announced no DevTools endpoint within 30 s; stderr:\n%s", log.String())
	}
	cfg, err := websocket.NewConfig(u, "http://127.0.0.1/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dialer = nil
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("connect to chromium devtools %s: %v", u, err)
	}
	ws.MaxPayloadBytes = 64 << 20
	b.ws = ws
	go b.readLoop()
	return b
}

// kill ends the browser: its whole process group (the wrapper script and
// every Chromium process it started).
func (b *Browser) kill() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	if b.ws != nil {
		_ = b.ws.Close()
	}
	if b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		_ = b.cmd.Wait()
	}
}

func (b *Browser) readLoop() {
	for {
		var m message
		if err := websocket.JSON.Receive(b.ws, &m); err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.pending {
				ch <- reply{Err: &cdpError{Message: "connection lost: " + err.Error()}}
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.pending[m.ID]; ok {
				delete(b.pending, m.ID)
				ch <- reply{Result: m.Result, Err: m.Error}
			}
			b.mu.Unlock()
			continue
		}
		p := b.pages[m.SessionID]
		b.mu.Unlock()
		if p != nil {
			p.event(m.Method, m.Params)
		}
	}
}

// call sends a DevTools command (to a page's session when sessionID is
// set) and decodes its result into out (which may be nil).
func (b *Browser) call(ctx context.Context, sessionID, method string, params, out any) error {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return fmt.Errorf("devtools connection: %w", b.readErr)
	}
	b.nextID++
	id := b.nextID
	ch := make(chan reply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	if params == nil {
		raw = []byte("{}")
	}
	if err := websocket.JSON.Send(b.ws, message{ID: id, Method: method, Params: raw, SessionID: sessionID}); err != nil {
		return fmt.Errorf("devtools %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return fmt.Errorf("%s: %w", method, r.Err)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("devtools %s: %w", method, ctx.Err())
	}
}

// Page is one tab.
type Page struct {
	b         *Browser
	sessionID string

	mu       sync.Mutex
	errs     []string
	console  []string
	loaded   chan struct{}
	loadOnce *sync.Once
}

// NewPage opens a blank tab with the page, runtime and log domains on.
func (b *Browser) NewPage(ctx context.Context) (*Page, error) {
	var tgt struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &tgt); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": tgt.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	p := &Page{b: b, sessionID: att.SessionID}
	b.mu.Lock()
	b.pages[att.SessionID] = p
	b.mu.Unlock()
	for _, d := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		if err := b.call(ctx, p.sessionID, d, nil, nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *Page) event(method string, params json.RawMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch method {
	case "Page.loadEventFired":
		if p.loadOnce != nil {
			p.loadOnce.Do(func() { close(p.loaded) })
		}
	case "Runtime.exceptionThrown":
		var e struct {
			ExceptionDetails struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(params, &e)
		p.errs = append(p.errs, "exception: "+e.ExceptionDetails.Text+" "+e.ExceptionDetails.Exception.Description)
	case "Runtime.consoleAPICalled":
		var e struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(params, &e)
		var parts []string
		for _, a := range e.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		line := e.Type + ": " + strings.Join(parts, " ")
		p.console = append(p.console, line)
		if e.Type == "error" || e.Type == "assert" {
			p.errs = append(p.errs, "console."+line)
		}
	case "Log.entryAdded":
		var e struct {
			Entry struct {
				Level, Source, Text, URL string
			} `json:"entry"`
		}
		_ = json.Unmarshal(params, &e)
		if e.Entry.Level == "error" {
			p.errs = append(p.errs, fmt.Sprintf("log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
		}
	}
}

// networkChanged is Chromium's error for a load cut by a change of the
// host's network interfaces or addresses: it cancels loads in flight when
// any interface changes, and tests that run beside (network namespaces,
// veth pairs: probe/, device/) make such changes. It says nothing of the
// page or the server.
const networkChanged = "net::ERR_NETWORK_CHANGED"

// retriedLoadErrors are the load errors after which Navigate loads the
// page again (a variable for the test, which cannot change the host's
// network at will).
var retriedLoadErrors = []string{networkChanged}

// retried reports whether e is one of retriedLoadErrors.
func retried(e string) bool {
	return slices.ContainsFunc(retriedLoadErrors, func(r string) bool { return strings.Contains(e, r) })
}

// navigateAttempts bounds the loads Navigate repeats after a network
// change cut one.
const navigateAttempts = 4

// Navigate loads url and waits for the load event. A load that Chromium
// cut because the host's interfaces changed (networkChanged) is made again,
// and the errors it logged are dropped.
func (p *Page) Navigate(ctx context.Context, url string) error {
	for attempt := 1; ; attempt++ {
		p.mu.Lock()
		before := len(p.errs)
		p.mu.Unlock()
		err := p.navigateOnce(ctx, url)
		p.mu.Lock()
		cut := slices.ContainsFunc(p.errs[before:], retried) || err != nil && retried(err.Error())
		again := cut && attempt < navigateAttempts && ctx.Err() == nil
		if again {
			p.errs = p.errs[:before]
		}
		p.mu.Unlock()
		if !again {
			return err
		}
	}
}

// navigateOnce loads url once and waits for the load event.
func (p *Page) navigateOnce(ctx context.Context, url string) error {
	p.mu.Lock()
	p.loaded = make(chan struct{})
	p.loadOnce = &sync.Once{}
	loaded := p.loaded
	p.mu.Unlock()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.b.call(ctx, p.sessionID, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return err
	}
	if nav.ErrorText != "" {
		return fmt.Errorf("navigate %s: %s", url, nav.ErrorText)
	}
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("navigate %s: no load event: %w", url, ctx.Err())
	}
}

// Eval evaluates a JavaScript expression (awaiting a promise) and decodes
// its value into out (which may be nil).
func (p *Page) Eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.call(ctx, p.sessionID, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("javascript: %s %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// WaitFor waits until the JavaScript expression cond is truthy in the page
// (checked in the page on every DOM change and animation frame), then
// returns the value of the expression val in out. It gives up when ctx
// ends.
func (p *Page) WaitFor(ctx context.Context, cond, val string, out any) error {
	expr := `new Promise((resolve) => {
		const check = () => { try { return !!(` + cond + `); } catch (e) { return false; } };
		if (check()) { resolve(` + val + `); return; }
		const mo = new MutationObserver(() => { if (check()) { mo.disconnect(); resolve(` + val + `); } });
		mo.observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
		const tick = () => { if (check()) { mo.disconnect(); resolve(` + val + `); } else { requestAnimationFrame(tick); } };
		requestAnimationFrame(tick);
	})`
	err := p.Eval(ctx, expr, out)
	if errors.Is(err, context.DeadlineExceeded) {
		var html string
		_ = p.Eval(context.Background(), "document.body ? document.body.innerText.slice(0, 2000) : ''", &html)
		return fmt.Errorf("waiting for %s: %w; page text:\n%s", cond, err, html)
	}
	return err
}

// Screenshot returns a PNG of the page's viewport.
func (p *Page) Screenshot(ctx context.Context) ([]byte, error) {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.b.call(ctx, p.sessionID, "Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

// SetViewport emulates a device of the given CSS size (mobile when width
// is below 600).
func (p *Page) SetViewport(ctx context.Context, width, height int, scale float64) error {
	return p.b.call(ctx, p.sessionID, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": height, "deviceScaleFactor": scale, "mobile": width < 600}, nil)
}

// Errors returns the console errors, uncaught exceptions and error log
// entries (failed loads, CSP violations) seen so far.
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}

// Console returns every console message seen so far.
func (p *Page) Console() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.console...)
}
