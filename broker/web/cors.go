package web

import (
	"net/http"
	"strings"

	"github.com/quiot/quiot/internal/wire"
)

// allowHeaders are the request headers a cross-origin page may send: the
// credentials, the resume point EventSource sends on reconnect, and the
// protocol's own headers.
const allowHeaders = "Authorization, Content-Type, " + wire.HeaderLastEventID + ", Accept, Cache-Control, " + wire.HeaderTime + ", " + wire.HeaderHeartbeat

// exposeHeaders are the response headers a cross-origin page may read.
const exposeHeaders = wire.HeaderSeq + ", " + wire.HeaderEpoch + ", " + wire.HeaderHeartbeat + ", Alt-Svc"

// corsPolicy is the set of allowed origins.
type corsPolicy struct {
	any     bool
	origins map[string]bool
}

func newCORSPolicy(list []string) (corsPolicy, error) {
	p := corsPolicy{origins: map[string]bool{}}
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		o, err := parseOrigin(s)
		if err != nil {
			return p, err
		}
		if o == "*" {
			p.any = true
			continue
		}
		p.origins[o] = true
	}
	return p, nil
}

// ParseOrigins splits a comma-separated --cors-origins value and checks
// each origin.
func ParseOrigins(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		o, err := parseOrigin(f)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// allows reports whether a request's Origin header is allowed. The opaque
// origin "null" (sandboxed frames, file: pages) is never allowed.
func (p corsPolicy) allows(origin string) bool {
	if origin == "null" || origin == "" {
		return false
	}
	return p.any || p.origins[strings.ToLower(origin)]
}

// setHeaders sets the CORS response headers for an allowed origin. The
// origin is echoed (never "*") so that credentials (cookies) work.
func (p corsPolicy) setHeaders(h http.Header, origin string) {
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
	h.Add("Vary", "Origin")
}
