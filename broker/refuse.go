package broker

import (
	"fmt"
	"net/http"
)

// Refusals of HTTP requests: each is answered by refuse or refuseErr at
// the place it is decided, which counts it under the request's protocol
// and reason (Stats.Protocols[proto].Refused, quiot_broker_refused_total)
// and logs it. Connection limits refused before any request are counted
// by admitConn (limits.go).

// refuse answers r with status and a one-line reason (fail) and notes the
// refusal (noteRefusal). id is the client's identity when known.
func (b *Broker) refuse(w http.ResponseWriter, r *http.Request, id string, reason Reason, status int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.noteRefusal(r, id, reason, status, msg)
	fail(w, status, "%s", msg)
}

// refuseErr answers r with status and err (fail), noting the refusal when
// err is one (RefusalOf).
func (b *Broker) refuseErr(w http.ResponseWriter, r *http.Request, id string, status int, err error) {
	b.noteErr(r, id, status, err)
	fail(w, status, "%v", err)
}

// noteErr notes err, answered with status, when it is a refusal
// (RefusalOf).
func (b *Broker) noteErr(r *http.Request, id string, status int, err error) {
	if reason, ok := RefusalOf(err); ok {
		b.noteRefusal(r, id, reason, status, err.Error())
	}
}

// noteRefusal counts a refusal of r and logs it: 401, 403 and throttled
// passwords (ReasonUnauthenticated, ReasonForbidden, ReasonThrottled) at
// Info, the others at Debug.
// The line names the identity (when known), the remote address, method
// and path, never the credentials or the query (which may carry a token);
// a client refused in a loop cannot flood the log: at most
// lograte.DefaultBurst lines per reason and minute, the next one saying
// how many were suppressed.
func (b *Broker) noteRefusal(r *http.Request, id string, reason Reason, status int, why string) {
	proto := protoOf(r)
	b.stats.countRefused(proto, reason)
	level := b.log.Debug
	if reason == ReasonUnauthenticated || reason == ReasonForbidden || reason == ReasonThrottled {
		level = b.log.Info
	}
	ok, suppressed := b.refusalLog.Allow(reason.String())
	if !ok {
		return
	}
	attrs := []any{"reason", reason.String(), "status", status, "why", why, "proto", proto, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path}
	if id != "" {
		attrs = append(attrs, "identity", id)
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	level("http request refused", attrs...)
}
