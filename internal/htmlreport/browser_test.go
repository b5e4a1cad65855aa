//go:build !arm

package htmlreport

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/chromium"
)

// TestReportInChromium: a report with a wide table and a large plot loads
// in headless Chromium with no console error, shows the plot inline, and
// on a phone-sized screen (390 CSS px) the page itself does not scroll
// sideways (wide tables scroll inside their box, the plot scales down).
func TestReportInChromium(t *testing.T) {
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 1200, 600))
	for x := range 1200 {
		img.Set(x, 300+int(200*float64(x%200)/200), color.RGBA{B: 200, A: 255})
	}
	var pb bytes.Buffer
	if err := png.Encode(&pb, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "latency.png"), pb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	md.WriteString("# quiot bench: HTTP/3 pub-sub vs MQTT over QUIC\n\n## Headline\n\n```\nh3 reaches first data 1 RTT sooner\n```\n\n")
	md.WriteString("| config | " + strings.Repeat("metric | ", 14) + "\n|---|" + strings.Repeat("---:|", 14) + "\n")
	md.WriteString("| h3 lean nbiot 256 B | " + strings.Repeat("1234.5 ± 12.3 | ", 14) + "\n\n")
	md.WriteString("![latency](latency.png)\n\nRaw data: [runs.csv](runs.csv).\n")
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(dir); err != nil {
		t.Fatal(err)
	}

	b := chromium.Start(t, chromium.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetViewport(ctx, 390, 844, 2); err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, "file://"+filepath.Join(dir, "report.html")); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Title       string
		Images      int
		Natural     int
		ImgWidth    float64
		ScrollWidth int
		InnerWidth  int
		TableScroll bool
	}
	err = p.WaitFor(ctx, `document.images.length === 1 && document.images[0].complete`, `({
		Title: document.title,
		Images: document.images.length,
		Natural: document.images[0].naturalWidth,
		ImgWidth: document.images[0].getBoundingClientRect().width,
		ScrollWidth: document.documentElement.scrollWidth,
		InnerWidth: window.innerWidth,
		TableScroll: document.querySelector('table').scrollWidth > document.querySelector('table').clientWidth,
	})`, &got)
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != "quiot bench: HTTP/3 pub-sub vs MQTT over QUIC" || got.Natural != 1200 {
		t.Errorf("title %q, plot natural width %d (inline data URI decoded?)", got.Title, got.Natural)
	}
	if got.ScrollWidth > got.InnerWidth || got.ImgWidth > float64(got.InnerWidth) || !got.TableScroll {
		t.Errorf("not phone-readable: page %d px wide in a %d px viewport, plot %.0f px, table scrolls in its box: %v",
			got.ScrollWidth, got.InnerWidth, got.ImgWidth, got.TableScroll)
	}
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	if os.Getenv("QUIOT_SCREENSHOT_DIR") != "" {
		png, err := p.Screenshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(os.Getenv("QUIOT_SCREENSHOT_DIR"), "report-phone.png"), png, 0o644)
	}
}
