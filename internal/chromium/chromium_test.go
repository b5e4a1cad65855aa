package chromium

import (
	"bytes"
	"context"
	"image/png"
	"strings"
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
