package client

import (
	"crypto/tls"
	"log/slog"

	"github.com/quiot/quiot/internal/tlssession"
)

// NewFileSessionCache returns a TLS session cache kept in path, with the
// RTT of the last connection to each broker (internal/tlssession): a
// publisher that runs as a new process for every wake-up resumes the TLS
// session of its previous run (a shorter handshake and, with allow_0rtt,
// the first publish in the first flight). The file holds resumption
// secrets: it belongs in the device's private state directory. A missing
// or unreadable file starts an empty cache.
func NewFileSessionCache(path string, log *slog.Logger) tls.ClientSessionCache {
	return tlssession.NewFile(path, log)
}

// RTTMemory is implemented by session caches that also keep the RTT of
// the last connection to each broker (NewFileSessionCache).
type RTTMemory = tlssession.RTTMemory
