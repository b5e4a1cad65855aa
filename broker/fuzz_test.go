package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/testutil"
)

// documentedStatus is every status the HTTP API answers with (the package
// documentation's list).
var documentedStatus = map[int]bool{
	http.StatusOK: true, http.StatusNoContent: true,
	http.StatusBadRequest: true, http.StatusUnauthorized: true, http.StatusForbidden: true,
	http.StatusNotFound: true, http.StatusMethodNotAllowed: true, http.StatusRequestEntityTooLarge: true,
	http.StatusUnsupportedMediaType: true, http.StatusTooEarly: true, http.StatusTooManyRequests: true,
	http.StatusServiceUnavailable: true, http.StatusInsufficientStorage: true,
}

// cancelOnFlush ends the request once the handler has flushed its first
// bytes: a subscription then returns instead of waiting for messages.
type cancelOnFlush struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w cancelOnFlush) Flush() {
	w.ResponseRecorder.Flush()
	w.cancel()
}

// FuzzHTTPHandler drives the broker's real HTTP handler (the one both
// listeners serve, connection guard included) with arbitrary method, path,
// query, one header and body, as HTTP/3 or HTTP/1.1: it must never panic
// and answer only statuses of the documented set. Requests net/http or
// http3 would refuse before the handler (a method that is no token, a
// target that is no request URI, a bad header field) are not sent.
func FuzzHTTPHandler(f *testing.F) {
	pki := testutil.NewPKI(f)
	acl, err := auth.Parse([]byte("[anonymous]\npublish = [\"pub/#\", \"a/#\"]\nsubscribe = [\"pub/#\", \"#\"]\n"))
	if err != nil {
		acl = nil // the ACL syntax changed: fuzz an open broker
	}
	b, err := broker.New(&broker.Options{
		Listen:       "127.0.0.1:0",
		Certificates: []tls.Certificate{pki.Server.TLS},
		Auth:         acl,
		Limits:       broker.Limits{HistoryBytes: 1 << 20, RetainedBytes: 1 << 20, MaxPayload: 4 << 10},
		Logger:       testutil.DiscardLogger(),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = b.Close() })
	handler := broker.HandlerForTest(b)
	f.Add("POST", "/v1/topics/pub%2Fa?qos=1&retain=1", true, "Quiot-Time", "1700000000000000000", []byte("x"))
	f.Add("GET", "/v1/topics/pub%2F%23?since=0", false, "Accept", "text/event-stream", []byte(nil))
	f.Add("POST", "/v1/publish", true, "Content-Type", "application/vnd.quiot.frames", []byte("\x01\x05"))
	f.Add("GET", "/v1/topics/a/../b", true, "Last-Event-ID", "abc-1", []byte(nil))
	f.Add("PUT", "/v1/topics?topic=..", true, "Authorization", "Bearer x", []byte("y"))
	f.Fuzz(func(t *testing.T, method, target string, h3 bool, hname, hval string, body []byte) {
		if !httpguts.ValidHeaderFieldName(method) {
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || u.Scheme != "" {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := &http.Request{
			Method: method, URL: u, RequestURI: target, Host: "localhost",
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)), RemoteAddr: "127.0.0.1:40000",
		}
		if h3 {
			r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/3.0", 3, 0
		}
		if httpguts.ValidHeaderFieldName(hname) && httpguts.ValidHeaderFieldValue(hval) {
			r.Header.Set(hname, hval)
		}
		w := cancelOnFlush{httptest.NewRecorder(), cancel}
		handler.ServeHTTP(w, r.WithContext(ctx))
		if !documentedStatus[w.Code] {
			t.Fatalf("%s %q: status %d (%q) is not in the documented set", method, target, w.Code, w.Body.String())
		}
	})
}
