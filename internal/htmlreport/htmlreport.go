//go:build !arm

package htmlreport

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
)

// BuiltIn reports whether this binary renders HTML reports.
const BuiltIn = true

// maxImage bounds one inlined image (a report's plots are tens of KB).
const maxImage = 8 << 20

// WriteDir reads dir/report.md and writes dir/report.html.
func WriteDir(dir string) error {
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		return fmt.Errorf("couldn't read report: %w", err)
	}
	root := os.DirFS(dir)
	out, err := Convert(md, func(name string) ([]byte, error) { return fs.ReadFile(root, name) })
	if err != nil {
		return fmt.Errorf("couldn't render %s/report.md: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.html"), out, 0o644); err != nil {
		return fmt.Errorf("couldn't write html report: %w", err)
	}
	return nil
}

// Convert renders markdown (CommonMark with GitHub tables) to a complete
// HTML page. Every image with a relative path is read with readFile (a
// slash-separated path below the report's directory) and inlined as a
// data: URI; an image that cannot be read stays a link and is listed in a
// note at the end. Raw HTML in the markdown is left out.
func Convert(md []byte, readFile func(name string) ([]byte, error)) ([]byte, error) {
	gm := goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithParserOptions(parser.WithAutoHeadingID()))
	doc := gm.Parser().Parse(text.NewReader(md))
	title := "report"
	var missing []string
	err := ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			if n.Level == 1 && title == "report" {
				title = plainText(n, md)
			}
		case *ast.Image:
			dest := string(n.Destination)
			name, ok := localPath(dest)
			if !ok {
				return ast.WalkContinue, nil
			}
			b, err := readFile(name)
			if err != nil || len(b) > maxImage {
				missing = append(missing, dest)
				return ast.WalkContinue, nil
			}
			n.Destination = []byte(dataURI(name, b))
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		return nil, err
	}
	var body bytes.Buffer
	if err := gm.Renderer().Render(&body, md, doc); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	out.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	out.WriteString("<link rel=\"icon\" href=\"data:,\">\n")
	fmt.Fprintf(&out, "<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n", html.EscapeString(title), css)
	out.Write(body.Bytes())
	if len(missing) > 0 {
		out.WriteString("<p class=\"note\">Not inlined (missing or too large): ")
		for i, m := range missing {
			if i > 0 {
				out.WriteString(", ")
			}
			out.WriteString(html.EscapeString(m))
		}
		out.WriteString("</p>\n")
	}
	out.WriteString("</main>\n</body>\n</html>\n")
	return out.Bytes(), nil
}

// localPath returns the slash path of a relative link inside the report
// directory: no scheme, not absolute, no "..".
func localPath(dest string) (string, bool) {
	if dest == "" || strings.Contains(dest, ":") || strings.HasPrefix(dest, "/") || strings.HasPrefix(dest, "#") {
		return "", false
	}
	if i := strings.IndexAny(dest, "?#"); i >= 0 {
		dest = dest[:i]
	}
	p := path.Clean(dest)
	if p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

func dataURI(name string, b []byte) string {
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return "data:" + ct + ";base64," + base64.StdEncoding.EncodeToString(b)
}

// plainText is the text of a node's inline children.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			if t, ok := c.(*ast.Text); ok {
				b.Write(t.Segment.Value(src))
			} else if s, ok := c.(*ast.String); ok {
				b.Write(s.Value)
			}
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// css: readable on a phone (fluid width, tables and code scroll sideways
// on their own), light and dark.
const css = `
:root{color-scheme:light dark;--fg:#1d1d1f;--bg:#fff;--mut:#666;--ln:#ddd;--code:#f4f4f6}
@media (prefers-color-scheme:dark){:root{--fg:#e6e6e6;--bg:#151618;--mut:#aaa;--ln:#3a3a3a;--code:#222427}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.55 system-ui,-apple-system,"Segoe UI",sans-serif;-webkit-text-size-adjust:100%}
main{max-width:62rem;margin:0 auto;padding:1rem}
h1{font-size:1.6rem;line-height:1.25}h2{font-size:1.3rem;margin-top:2rem;border-bottom:1px solid var(--ln)}h3{font-size:1.1rem}
table{display:block;overflow-x:auto;border-collapse:collapse;margin:1rem 0;font-size:.9rem;font-variant-numeric:tabular-nums;max-width:100%}
th,td{border:1px solid var(--ln);padding:.3rem .5rem;white-space:nowrap}
th{background:var(--code)}
img{display:block;max-width:100%;height:auto;margin:1rem auto;background:#fff;border-radius:4px}
pre{overflow-x:auto;background:var(--code);padding:.7rem;border-radius:4px;font-size:.85rem}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;background:var(--code);padding:0 .2em;border-radius:3px}
pre code{padding:0;background:none}
blockquote{margin:1rem 0;padding:.2rem 1rem;border-left:4px solid #d9822b;background:var(--code)}
a{color:#2f6fdd}
.note{color:var(--mut);font-size:.85rem}
@media (max-width:600px){body{font-size:15px}main{padding:.6rem}th,td{padding:.25rem .35rem}}
`
