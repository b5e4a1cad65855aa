package broker

import (
	"net/http"
	"runtime"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/version"
	"github.com/quiot/quiot/internal/wire"
)

// webHandler puts the browser part (broker/web) in front of next when
// Options.Web is set, and feeds it every accepted message (a tap) for its
// topic view.
func (b *Broker) webHandler(next http.Handler) (http.Handler, error) {
	if b.opts.Web == nil {
		return next, nil
	}
	wo := *b.opts.Web
	if wo.Logger == nil {
		wo.Logger = b.log
	}
	h, err := web.New(&wo, webBackend{b})
	if err != nil {
		return nil, err
	}
	b.AddTap(func(m *Message) { h.Observe(m.Topic, m.Payload, m.Retain, m.Origin) })
	return h.Wrap(next), nil
}

// webBackend is the broker as broker/web sees it.
type webBackend struct{ b *Broker }

// Identify authenticates r as every broker request is.
func (w webBackend) Identify(rw http.ResponseWriter, r *http.Request) (string, bool) {
	return w.b.identify(rw, r)
}

// Auth is the broker's authenticator.
func (w webBackend) Auth() *auth.Authenticator { return w.b.opts.Auth }

// WebStats is what GET /v1/stats reports: the broker's counters (the
// figures /metrics has) and the process's.
type WebStats struct {
	Stats
	// Epoch identifies the broker run (hex).
	Epoch string
	// Version is the quiot version.
	Version string
	// Goroutines is the number of goroutines.
	Goroutines int
	// HeapBytes is the Go heap in use.
	HeapBytes uint64
	// SysBytes is the memory the Go runtime holds from the OS.
	SysBytes uint64
}

// Stats returns WebStats.
func (w webBackend) Stats() any {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return WebStats{Stats: w.b.Stats(), Epoch: wire.FormatEpoch(w.b.Epoch()), Version: version.Version,
		Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc, SysBytes: ms.Sys}
}

// SetAltSvc advertises HTTP/3 on a TCP response.
func (w webBackend) SetAltSvc(h http.Header) { _ = w.b.h3.SetQUICHeaders(h) }
