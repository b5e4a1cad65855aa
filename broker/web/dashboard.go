package web

import (
	"bytes"
	"compress/gzip"
	_ "embed" // the dashboard's files
	"net/http"
	"strconv"
	"strings"
)

// The dashboard: plain HTML, CSS and JavaScript, no framework, no CDN.
// Embedded as strings (not an embed.FS: its directory code costs the Pi
// binary more than the three files).
var (
	//go:embed ui/index.html
	indexHTML string
	//go:embed ui/app.js
	appJS string
	//go:embed ui/app.css
	appCSS string
)

// asset is one dashboard file, with its gzip form when that is smaller.
type asset struct {
	body, gz []byte
	ctype    string
	etag     string
}

func (h *Handler) loadAssets() {
	h.assets = map[string]*asset{}
	for _, f := range []struct{ path, ctype, body string }{
		{"/index.html", "text/html; charset=utf-8", indexHTML},
		{"/app.js", "text/javascript; charset=utf-8", appJS},
		{"/app.css", "text/css; charset=utf-8", appCSS},
	} {
		b := []byte(f.body)
		a := &asset{body: b, ctype: f.ctype}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(b)
		_ = zw.Close()
		if buf.Len() < len(b) {
			a.gz = buf.Bytes()
		}
		a.etag = `"` + strconv.Itoa(len(b)) + "-" + strconv.FormatUint(uint64(crc(b)), 16) + `"`
		h.assets[f.path] = a
	}
}

// crc is a cheap content hash for ETags (FNV-1a).
func crc(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// handleDashboard serves the dashboard's files. The page itself is behind
// the broker's authentication: a browser without a session or credentials
// (on a broker that refuses anonymous clients) gets 401 with a Basic
// challenge, so it asks for the ACL user name and password, and the answer
// sets the session cookie.
func (h *Handler) handleDashboard(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	h.assetsOnce.Do(h.loadAssets)
	p := r.URL.Path
	if p == "/" {
		p = "/index.html"
	}
	p = strings.TrimPrefix(p, "/ui")
	a := h.assets[p]
	if a == nil {
		fail(w, http.StatusNotFound, "no such dashboard file %q", r.URL.Path)
		return
	}
	hd := w.Header()
	if r.ProtoMajor < 3 {
		h.be.SetAltSvc(hd)
	}
	if p == "/index.html" {
		if !h.dashboardAuth(w, r) {
			return
		}
	}
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Type", a.ctype)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	hd.Set("ETag", a.etag)
	hd.Add("Vary", "Accept-Encoding")
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	if a.gz != nil && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		hd.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// dashboardAuth lets the page through when the request is authenticated
// (session, credentials, certificate) or anonymous clients are accepted.
// Credentials sent with the page request (a Basic prompt, a certificate)
// also start a session (the cookie the page's own requests then carry); a
// session token never does: from a link (/?access_token=T) it would plant
// someone else's session in the victim's browser (login CSRF). The page's
// login form gets a cookie by a same-origin POST /v1/session instead.
func (h *Handler) dashboardAuth(w http.ResponseWriter, r *http.Request) bool {
	sess, _ := r.Context().Value(identityKey{}).(*session)
	hasSession := sess != nil
	hasCreds := r.Header.Get("Authorization") != "" || (r.TLS != nil && len(r.TLS.VerifiedChains) > 0)
	if !hasSession && !hasCreds && !h.be.Auth().Anonymous() {
		w.Header().Set("WWW-Authenticate", `Basic realm="quiot dashboard", charset="UTF-8"`)
		fail(w, http.StatusUnauthorized, "log in with an ACL user name and password")
		return false
	}
	gen := h.be.Auth().Generation()
	id, ok := h.be.Identify(w, r)
	if !ok {
		return false
	}
	if !hasSession && hasCreds {
		exp := h.opts.Now().Add(h.opts.SessionTTL)
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: h.signer.sign(id, exp, gen), Path: "/", MaxAge: int(h.opts.SessionTTL.Seconds()),
			HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	}
	return true
}
