package chromium

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPage: a page's exceptions and console errors are collected, WaitFor
// returns once the DOM changes, and a screenshot is a PNG of the window.
func TestPage(t *testing.T) {
	b := Start(t, Options{Width: 640, Height: 480})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	page := `data:text/html,<title>t</title><body><script>
console.error('boom'); setTimeout(() => { throw new Error('late'); }, 20); setTimeout(() => document.body.append('done'), 40);
</script>`
	if err := p.Navigate(ctx, page); err != nil {
		t.Fatal(err)
	}
	var text string
	if err := p.WaitFor(ctx, `document.body.textContent.includes('done')`, `document.body.textContent`, &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "done") {
		t.Fatalf("text %q", text)
	}
	// Chromium may report an uncaught exception a little after later
	// DOM changes: wait for it.
	for errs := strings.Join(p.Errors(), "\n"); !strings.Contains(errs, "boom") || !strings.Contains(errs, "late"); errs = strings.Join(p.Errors(), "\n") {
		select {
		case <-ctx.Done():
			t.Fatalf("errors %q, want the console error and the exception", errs)
		case <-time.After(10 * time.Millisecond): // polling interval, not a synchronisation
		}
	}
	if err := p.Eval(ctx, `nosuchname`, nil); err == nil || !strings.Contains(err.Error(), "nosuchname") {
		t.Errorf("eval of an undefined name: %v", err)
	}
	shot, err := p.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	if w := img.Bounds().Dx(); w != 640 {
		t.Errorf("screenshot %d px wide, want 640", w)
	}
}

// TestNavigateAgainAfterCutLoad: a load that Chromium cut because the
// host's interfaces changed (net::ERR_NETWORK_CHANGED, as tests that make
// network namespaces beside cause) is made again, and the cut load's
// errors are dropped. The host's network cannot be changed at will here,
// so the first load of a script is cut by the server instead
// (net::ERR_CONTENT_LENGTH_MISMATCH), standing in for the network change.
func TestNavigateAgainAfterCutLoad(t *testing.T) {
	old := retriedLoadErrors
	retriedLoadErrors = []string{"net::ERR_CONTENT_LENGTH_MISMATCH"}
	t.Cleanup(func() { retriedLoadErrors = old })
	var loads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, `<title>t</title><script src="/s.js"></script><body>page</body>`)
		case "/s.js":
			if loads.Add(1) == 1 { // the first load is cut short
				w.Header().Set("Content-Length", "100")
				fmt.Fprint(w, "window")
				if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
					_ = c.Close()
				}
				return
			}
			w.Header().Set("Content-Type", "text/javascript")
			fmt.Fprint(w, `window.loadedJS = true;`)
		default: // /favicon.ico, which Chromium asks for after the load: a 404 is logged as an error
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	b := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := p.Eval(ctx, `window.loadedJS === true`, &ok); err != nil || !ok {
		t.Fatalf("script not loaded after the cut load (%v); errors %q", err, p.Errors())
	}
	if n := loads.Load(); n != 2 {
		t.Errorf("s.js requested %d times, want 2", n)
	}
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("errors kept: %q", errs)
	}
}
