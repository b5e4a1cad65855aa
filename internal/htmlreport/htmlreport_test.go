//go:build !arm

package htmlreport

import (
	"bytes"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyPNG is a real 4x4 PNG.
func tinyPNG(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestConvert(t *testing.T) {
	pngBytes := tinyPNG(t)
	files := map[string][]byte{"plots/latency.png": pngBytes}
	read := func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	}
	md := "# quiot bench: h3 vs mqtt & more\n\n| proto | p50 |\n|---|---:|\n| h3 | 1.2 |\n\n" +
		"![latency](plots/latency.png)\n\n![gone](missing.png)\n\n![remote](https://example.com/x.png)\n\n" +
		"<script>alert(1)</script>\n\n```\nheadline\n```\n"
	out, err := Convert([]byte(md), read)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	want := []string{
		"<title>quiot bench: h3 vs mqtt &amp; more</title>",
		`name="viewport"`,
		"<table>", "<td>h3</td>",
		`src="data:image/png;base64,` + base64.StdEncoding.EncodeToString(pngBytes) + `"`,
		`src="missing.png"`, "Not inlined (missing or too large): missing.png",
		`src="https://example.com/x.png"`,
		"<pre><code>headline",
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if strings.Contains(s, "<script>") {
		t.Error("raw HTML from the markdown was rendered")
	}
}

func TestLocalPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"a.png", "a.png", true},
		{"plots/./a.png", "plots/a.png", true},
		{"a.png?x=1", "a.png", true},
		{"../secret.png", "", false},
		{"plots/../../x.png", "", false},
		{"/etc/passwd", "", false},
		{"file:///etc/passwd", "", false},
		{"data:image/png;base64,AA", "", false},
		{"#frag", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := localPath(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("localPath(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestWriteDir(t *testing.T) {
	dir := t.TempDir()
	if err := WriteDir(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no report.md: err %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte("# r\n\n![p](p.png)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.png"), tinyPNG(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("data:image/png;base64,")) {
		t.Fatal("plot not inlined")
	}
}
