package web

import (
	"context"
	"log/slog"
	"strings"
)

// RedactTokens returns a logger that writes what l writes, with every
// session token in a URL (access_token=...) replaced by "REDACTED". The
// broker gives it to the HTTP/3 server, whose debug log names each
// request's URI.
func RedactTokens(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return slog.New(redactHandler{l.Handler()})
}

type redactHandler struct{ slog.Handler }

// Handle rewrites the record's attributes and passes it on.
func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	msg := redactString(r.Message)
	out := slog.NewRecord(r.Time, r.Level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

// WithAttrs keeps the redaction on derived handlers.
func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = redactAttr(a)
	}
	return redactHandler{h.Handler.WithAttrs(red)}
}

// WithGroup keeps the redaction on derived handlers.
func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.Handler.WithGroup(name)}
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); strings.Contains(s, TokenParam+"=") {
			return slog.String(a.Key, redactString(s))
		}
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = redactAttr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		if s, ok := v.Any().(interface{ String() string }); ok {
			if str := s.String(); strings.Contains(str, TokenParam+"=") {
				return slog.String(a.Key, redactString(str))
			}
		}
	}
	return a
}

// redactString replaces the value of every access_token= in s.
func redactString(s string) string {
	key := TokenParam + "="
	var b strings.Builder
	for {
		i := strings.Index(s, key)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+len(key)])
		b.WriteString("REDACTED")
		s = s[i+len(key):]
		j := strings.IndexAny(s, "&; \t\n\"'#")
		if j < 0 {
			return b.String()
		}
		s = s[j:]
	}
}
