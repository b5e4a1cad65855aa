package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/chromium"
)

// openDashboard opens the dashboard at path (with its query) in a new tab,
// logged in first when login holds a user and password, and waits until the live view's subscription runs (the broker counts
// it), so that messages published after it reach the page.
func openDashboard(ctx context.Context, t *testing.T, b *chromium.Browser, e *env, path string, login ...string) *chromium.Page {
	t.Helper()
	if len(login) == 2 {
		loginBrowser(ctx, t, b, e, login[0], login[1]) // first: the tab opened last is in front
	}
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, e.URL+path); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitFor(ctx, `document.getElementById('live-proto').dataset.proto`, "null", nil); err != nil {
		t.Fatal(err)
	}
	waitStats(ctx, t, e, func(s broker.Stats) bool { return s.Subscriptions >= 1 })
	return p
}

// loginBrowser logs the browser in as user, as the dashboard's login form
// does: a same-origin POST /v1/session, whose answer sets the session
// cookie, from a tab of its own (its page loads leave the test's tab
// alone; open the test's tab after it, in front, or its animation frames
// stop). A session token in the page's URL sets no cookie (issue 27
// finding 9).
func loginBrowser(ctx context.Context, t *testing.T, b *chromium.Browser, e *env, user, pw string) {
	t.Helper()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, e.URL+"/healthz"); err != nil {
		t.Fatal(err)
	}
	var status int
	if err := p.Eval(ctx, `fetch('/v1/session', {method: 'POST', headers: {Authorization: 'Basic ' + btoa('`+user+`:`+pw+`')}}).then((r) => r.status)`, &status); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK {
		t.Fatalf("log in as %s: POST /v1/session %d", user, status)
	}
}

// h3Publish publishes payload to topic over HTTP/3 (hdr: extra headers,
// e.g. Authorization).
func h3Publish(t *testing.T, e *env, topic, payload string, hdr ...string) {
	t.Helper()
	resp, body := do(t, e.h3, http.MethodPost, e.URL+"/v1/topics/"+url.PathEscape(topic), payload, hdr...)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("publish %s: %d %s", topic, resp.StatusCode, body)
	}
}

// screenshot writes the page's viewport to QUIOT_SCREENSHOT_DIR/name when
// that variable is set (to look at the layout by eye).
func screenshot(ctx context.Context, t *testing.T, p *chromium.Page, name string) {
	t.Helper()
	dir := os.Getenv("QUIOT_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	shot, err := p.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}

// labelBox is a y-axis label the plot drew, in CSS pixels of the canvas.
type labelBox struct{ X, Y, W, H float64 }

// overlapping returns a description of the first two labels whose boxes
// intersect, or "".
func overlapping(ls []labelBox) string {
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			a, b := ls[i], ls[j]
			if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
				return fmt.Sprintf("labels at %+v and %+v", a, b)
			}
		}
	}
	return ""
}

// TestBrowserDashboardPlot: the live plot draws numeric payloads only: a binary payload (00 01 ff) is listed as hex and never plotted, nor
// is text that merely parses as a number in JavaScript ("0x10"); the
// y-axis labels of neighbouring bands do not overlap, at desktop and at
// phone width.
func TestBrowserDashboardPlot(t *testing.T) {
	e := start(t, "", web.Options{Dashboard: true})
	b := browser(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := openDashboard(ctx, t, b, e, "/")

	numeric := map[string][]string{
		"sensors/temp":     {"21.5", "22.25", "23.75", "22"},
		"sensors/humidity": {"40", "55.5", "61", "58"},
		"sensors/pressure": {"101325", "101390.5", "101402", "101350"},
		"sensors/tiny":     {"0.00012", "0.00031", "-0.00007", "0.0002"},
		"sensors/big":      {"-1234567.5", "2345678", "1e6", "-3e5"},
	}
	h3Publish(t, e, "sensors/bin", "\x00\x01\xff")
	h3Publish(t, e, "sensors/hexword", "0x10")
	for i := range 4 {
		for _, tp := range slices.Sorted(maps.Keys(numeric)) {
			h3Publish(t, e, tp, numeric[tp][i])
		}
	}
	// The live view gets the messages in order on one stream: once the
	// last one is plotted, the binary one has been handled.
	h3Publish(t, e, "sensors/last", "7")
	const legendTopics = `Array.from(document.querySelectorAll('#legend .lg'), (e) => e.textContent.split(' = ')[0]).sort()`
	var plotted []string
	if err := p.WaitFor(ctx, `document.getElementById('legend').textContent.includes('sensors/last = 7')`, legendTopics, &plotted); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Sorted(maps.Keys(numeric)), "sensors/last")
	slices.Sort(want)
	if !slices.Equal(plotted, want) {
		t.Errorf("plotted topics %q, want the numeric ones %q (no binary, no 0x10)", plotted, want)
	}
	var binRow string
	if err := p.Eval(ctx, `document.querySelector('#live li[data-topic="sensors/bin"]').textContent`, &binRow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(binRow, "00 01 ff") || strings.Contains(binRow, "511") {
		t.Errorf("the binary message is listed as %q, want its bytes in hex (00 01 ff)", binRow)
	}
	var binCell string
	if err := p.WaitFor(ctx, `document.querySelector('tr[data-topic="sensors/bin"] td.val')`, `document.querySelector('tr[data-topic="sensors/bin"] td.val').textContent`, &binCell); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(binCell, "00 01 ff") {
		t.Errorf("the topic table shows the binary value as %q, want 00 01 ff", binCell)
	}
	screenshot(ctx, t, p, "dashboard-plot-desktop.png")

	checkLabels := func(what string) {
		t.Helper()
		var ls []labelBox
		if err := p.Eval(ctx, `JSON.parse(document.getElementById('plot').dataset.labels || '[]')`, &ls); err != nil {
			t.Fatal(err)
		}
		if len(ls) != 2*len(want) {
			t.Errorf("%s: the plot drew %d y-axis labels, want 2 per band (%d)", what, len(ls), 2*len(want))
		}
		for _, l := range ls {
			if l.W <= 0 || l.H <= 0 || l.X < 0 || l.Y < 0 {
				t.Errorf("%s: a label's box %+v is empty or outside the canvas", what, l)
			}
		}
		if o := overlapping(ls); o != "" {
			t.Errorf("%s: %s overlap", what, o)
		}
	}
	checkLabels("desktop")

	// A phone: the plot is redrawn for the new width.
	if err := p.SetViewport(ctx, 390, 844, 2); err != nil {
		t.Fatal(err)
	}
	h3Publish(t, e, "sensors/last", "8")
	if err := p.WaitFor(ctx, `document.getElementById('legend').textContent.includes('sensors/last = 8')`, "null", nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Eval(ctx, `document.getElementById('live-sec').scrollIntoView()`, nil); err != nil {
		t.Fatal(err)
	}
	screenshot(ctx, t, p, "dashboard-plot-phone.png")
	checkLabels("phone")
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestBrowserDashboardLogin: the dashboard shows its login form only where
// logging in means something: not on an open broker (no ACL), not when
// logged in, but on an ACL broker that serves anonymous clients.
func TestBrowserDashboardLogin(t *testing.T) {
	for _, tc := range []struct {
		name, acl string
		login     bool // log in as alice (POST /v1/session)
		wantForm  bool
		wantWho   string
	}{
		{"open broker", "", false, false, "open broker, no login"},
		{"ACL broker, anonymous", testACL + anonSection, false, true, "anonymous"},
		{"ACL broker, logged in", testACL, true, false, "logged in as alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, tc.acl, web.Options{Dashboard: true})
			b := browser(t, e)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tc.login {
				loginBrowser(ctx, t, b, e, "alice", "alice-pw") // first: the tab opened last is in front
			}
			p, err := b.NewPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Navigate(ctx, e.URL+"/"); err != nil {
				t.Fatal(err)
			}
			var got struct {
				Form, Logout bool
				Who          string
			}
			const who = `document.getElementById('who')`
			if err := p.WaitFor(ctx, who+`.textContent !== '…'`,
				`({Form: !document.getElementById('login').hidden, Logout: !document.getElementById('logout').hidden, Who: `+who+`.textContent})`, &got); err != nil {
				t.Fatal(err)
			}
			if got.Form != tc.wantForm || got.Who != tc.wantWho || got.Logout != tc.login {
				t.Errorf("login form shown %v, log-out button %v, who %q; want form %v, log-out %v, who %q",
					got.Form, got.Logout, got.Who, tc.wantForm, tc.login, tc.wantWho)
			}
		})
	}
}

// TestDashboardScript checks the dashboard's pure functions
// (window.quiotDashboard) in Chromium: which payloads are plotted, how
// payloads are shown, the y-axis labels and the plot's band layout.
func TestDashboardScript(t *testing.T) {
	e := start(t, "", web.Options{Dashboard: true})
	b := browser(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, e.URL+"/"); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitFor(ctx, "window.quiotDashboard", "null", nil); err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) map[string]string {
		return map[string]string{"payload": base64.StdEncoding.EncodeToString([]byte(s))}
	}
	txt := func(s string) map[string]string { return map[string]string{"text": s} }
	num := func(f float64) *float64 { return &f }
	t.Run("payloads", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			msg   map[string]string
			shown string
			value *float64 // nil: not plotted
		}{
			{"binary", b64("\x00\x01\xff"), "[3 bytes] 00 01 ff", nil},
			{"one byte", b64("\xff"), "[1 byte] ff", nil},
			{"control characters", b64("\x00\x01\x7f"), "[3 bytes] 00 01 7f", nil},
			{"long binary", b64(strings.Repeat("\xff", 40)), "[40 bytes] " + strings.TrimSpace(strings.Repeat("ff ", 32)) + " …", nil},
			{"decimal", b64("21.5"), "21.5", num(21.5)},
			{"text field", txt("21.5"), "21.5", num(21.5)},
			{"text field preferred", map[string]string{"text": "3", "payload": base64.StdEncoding.EncodeToString([]byte("4"))}, "3", num(3)},
			{"text field, control characters", txt("a\x00"), "[2 bytes] 61 00", nil},
			{"integer", b64("42"), "42", num(42)},
			{"spaces", b64(" -7 \n"), " -7 \n", num(-7)},
			{"exponent", b64("-3.5e-2"), "-3.5e-2", num(-0.035)},
			{"leading dot", b64(".5"), ".5", num(0.5)},
			{"hex text", b64("0x10"), "0x10", nil},
			{"binary literal text", b64("0b101"), "0b101", nil},
			{"Infinity", b64("Infinity"), "Infinity", nil},
			{"overflow", b64("1e999"), "1e999", nil},
			{"empty", b64(""), "", nil},
			{"words", b64("on"), "on", nil},
			{"number and unit", b64("21.5 C"), "21.5 C", nil},
			{"JSON object", b64(`{"t":21.5}`), `{"t":21.5}`, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				m, _ := json.Marshal(tc.msg)
				var got struct {
					Shown string
					Value *float64
				}
				js := `(() => { const d = window.quiotDashboard, p = d.decodePayload(` + string(m) + `); return {Shown: d.payloadText(p), Value: d.plotValue(p)}; })()`
				if err := p.Eval(ctx, js, &got); err != nil {
					t.Fatal(err)
				}
				if got.Shown != tc.shown {
					t.Errorf("shown as %q, want %q", got.Shown, tc.shown)
				}
				switch {
				case tc.value == nil && got.Value != nil:
					t.Errorf("plotted as %v, want not plotted", *got.Value)
				case tc.value != nil && (got.Value == nil || *got.Value != *tc.value):
					t.Errorf("plotted as %v, want %v", got.Value, *tc.value)
				}
			})
		}
	})
	t.Run("axis labels", func(t *testing.T) {
		for _, tc := range []struct {
			v0, v1 float64
			lo, hi string
		}{
			{21.5, 23.75, "21.5", "23.75"},
			{101325, 101402, "101.3k", "101.4k"},
			{-1234567.5, 2345678, "-1.23M", "2.35M"},
			{-0.00007, 0.00031, "-7.0e-5", "3.1e-4"},
			{0, 1, "0", "1"},
			{1000001, 1000002, "1.000001M", "1.000002M"},
		} {
			var got []string
			if err := p.Eval(ctx, fmt.Sprintf("window.quiotDashboard.axisLabels(%v, %v)", tc.v0, tc.v1), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0] != tc.lo || got[1] != tc.hi {
				t.Errorf("labels of %v..%v: %q, want %q %q", tc.v0, tc.v1, got, tc.lo, tc.hi)
			}
		}
	})
	t.Run("layout", func(t *testing.T) {
		for n := 1; n <= 8; n++ {
			for _, w := range []int{300, 800} {
				var lay struct {
					L, T, B, H float64
					Bands      []struct{ Top, H float64 }
				}
				if err := p.Eval(ctx, fmt.Sprintf(`(() => { const l = window.quiotDashboard.plotLayout(%d, %d, 50);
					return {L: l.L, T: l.T, B: l.B, H: l.h, Bands: l.bands.map((b) => ({Top: b.top, H: b.h}))}; })()`, w, n), &lay); err != nil {
					t.Fatal(err)
				}
				if len(lay.Bands) != n || lay.L < 50 || lay.H < 220 {
					t.Fatalf("%d bands, %d wide: %+v", n, w, lay)
				}
				for i, bd := range lay.Bands {
					// Each band is tall enough for its two labels (11 px
					// font) with room between them, and leaves a gap to
					// the next.
					if bd.H < 40 || bd.Top < lay.T || bd.Top+bd.H > lay.H-lay.B {
						t.Errorf("%d bands, %d wide: band %d %+v outside the plot %+v", n, w, i, bd, lay)
					}
					if i > 0 && bd.Top < lay.Bands[i-1].Top+lay.Bands[i-1].H+8 {
						t.Errorf("%d bands, %d wide: band %d starts %v after band %d ends, want a gap of at least 8 px", n, w, i, bd.Top-lay.Bands[i-1].Top-lay.Bands[i-1].H, i-1)
					}
				}
			}
		}
	})
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestDashboardDocImage writes the picture of the dashboard that
// docs/browser.md shows (QUIOT_SCREENSHOT_DIR/dashboard-doc.png; copy it
// to docs/img/dashboard.png): alice logged in, temperatures published
// over MQTT and a humidity over HTTP/3 for a few seconds, a retained
// status, a door state and a binary reading. It only makes the picture
// (skipped without QUIOT_SCREENSHOT_DIR); the other tests check.
func TestDashboardDocImage(t *testing.T) {
	dir := os.Getenv("QUIOT_SCREENSHOT_DIR")
	if dir == "" {
		t.Skip("writes docs/img/dashboard.png's source only when QUIOT_SCREENSHOT_DIR is set")
	}
	e := start(t, testACL, web.Options{Dashboard: true})
	mq := startMQTT(t, e)
	alice := []string{"Authorization", basic("alice", "alice-pw")}
	if resp, body := do(t, e.h3, http.MethodPost, e.URL+"/v1/topics/"+url.PathEscape("sensors/gateway/status")+"?retain=1", "online", alice...); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("retained publish: %d %s", resp.StatusCode, body)
	}
	mqttPublish(t, mq, "sensors/garage/door", "closed")
	b := browser(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := openDashboard(ctx, t, b, e, "/", "alice", "alice-pw")
	mqttPublish(t, mq, "sensors/garage/raw", "\x00\x01\xff")
	tick := time.NewTicker(100 * time.Millisecond) // the pace of the readings in the picture
	defer tick.Stop()
	// Publish until the topic table has shown 60 readings of a
	// temperature, and take the picture while the readings go on (the
	// rates then are the publishing rates).
	const shown = `+((document.querySelector('tr[data-topic="sensors/kitchen/temp"] td.count') || {}).textContent || 0) >= 60`
	for i := 0; ; i++ {
		<-tick.C
		x := float64(i) / 10
		mqttPublish(t, mq, "sensors/kitchen/temp", fmt.Sprintf("%.2f", 21+1.5*math.Sin(x/1.3)))
		mqttPublish(t, mq, "sensors/garage/temp", fmt.Sprintf("%.2f", 17+0.9*math.Sin(x/0.7+1)))
		if i%3 == 0 {
			h3Publish(t, e, "sensors/kitchen/humidity", fmt.Sprintf("%.1f", 46-2.5*math.Cos(x/2)), alice...)
		}
		var done bool
		if err := p.Eval(ctx, shown, &done); err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the topic table never showed 60 readings")
		}
	}
	screenshot(ctx, t, p, "dashboard-doc.png")
}

// TestBrowserTokenLinkSetsNoCookie is issue 27 finding 9 in Chromium: a
// link to the dashboard carrying someone's session token
// (/?access_token=T) does not log the browser in as them: no session
// cookie is set, so the page's own requests stay unauthenticated.
func TestBrowserTokenLinkSetsNoCookie(t *testing.T) {
	e := start(t, testACL, web.Options{Dashboard: true})
	b := browser(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.session(t, "bob", "bob-pw") // the attacker's own session
	if err := p.Navigate(ctx, e.URL+"/?"+web.TokenParam+"="+url.QueryEscape(tok)); err != nil {
		t.Fatal(err)
	}
	var status int
	if err := p.Eval(ctx, `fetch('/v1/session').then((r) => r.status)`, &status); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusUnauthorized {
		t.Fatalf("after opening a link with a session token, GET /v1/session is %d, want 401 (no cookie planted)", status)
	}
}
