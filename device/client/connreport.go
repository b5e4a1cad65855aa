package client

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/quiot/quiot/internal/certs"
)

// ErrUnreachable is returned (wrapped, with the last connection error) when
// the broker could not be reached within Options.ConnectTimeout.
var ErrUnreachable = errors.New("broker unreachable")

// ErrPinMismatch is returned (wrapped) when the broker's certificate does
// not have the SHA-256 fingerprint of Options.PinSHA256. It is final: a
// retry meets the same certificate.
var ErrPinMismatch = errors.New("broker certificate does not match the pinned SHA-256 fingerprint")

// unreachableHint is what to check when a broker does not answer.
const unreachableHint = "is a broker running there? is the scheme right: https:// for HTTP/3 (UDP, port 4433), " +
	"mqtt-quic:// for MQTT over QUIC (UDP, 14567), mqtt:// for MQTT over TCP (1883), mqtts:// for MQTT over TLS (8883)"

// dialError is a failure to establish a connection to the broker (as
// opposed to a failure on an established one).
type dialError struct {
	addr string
	err  error
}

func (e *dialError) Error() string { return fmt.Sprintf("couldn't connect to %s: %v", e.addr, e.err) }
func (e *dialError) Unwrap() error { return e.err }

// isDialError reports whether err is a failure to connect.
func isDialError(err error) bool {
	_, ok := errors.AsType[*dialError](err)
	return ok
}

// connReport says once per outage that the broker cannot be reached: the
// first failure of an outage is a warning with what to check, later ones
// are debug lines, and the first success after a warning is an info line.
// It also measures how long the outage lasts (Options.ConnectTimeout).
type connReport struct {
	log     *slog.Logger
	addr    string
	timeout time.Duration // Options.ConnectTimeout

	mu       sync.Mutex
	since    time.Time // first failure of the current outage; zero while connected
	reported bool
	last     error // the last failure
}

// failed records a failed attempt that began at began (retrying tells
// whether another follows) and returns how long the outage has lasted:
// since the first failed attempt of the outage began.
func (r *connReport) failed(err error, began time.Time, retrying bool) time.Duration {
	r.mu.Lock()
	now := time.Now()
	if r.since.IsZero() {
		r.since = began
	}
	first := !r.reported
	r.reported = true
	r.last = err
	down := now.Sub(r.since)
	r.mu.Unlock()
	if !first {
		r.log.Debug("still no connection to the broker; retrying", "broker", r.addr, "error", err, "for", down.Round(time.Millisecond))
		return down
	}
	then := "not retrying"
	switch {
	case retrying && r.timeout > 0:
		then = fmt.Sprintf("retrying with backoff for up to %s (attempts are logged at debug level)", r.timeout)
	case retrying:
		then = "retrying with backoff until it answers (attempts are logged at debug level)"
	}
	if isDialError(err) {
		r.log.Warn("couldn't connect to the broker; "+then, "broker", r.addr, "error", err, "check", unreachableHint)
	} else {
		r.log.Warn("broker request failed; "+then, "broker", r.addr, "error", err)
	}
	return down
}

// ok records a working connection, ending the outage.
func (r *connReport) ok() {
	r.mu.Lock()
	reported, since := r.reported, r.since
	r.since, r.reported, r.last = time.Time{}, false, nil
	r.mu.Unlock()
	if reported {
		r.log.Info("connected to the broker", "broker", r.addr, "after", time.Since(since).Round(time.Millisecond))
	}
}

// lastErr returns the last failure of the current outage (nil when none).
func (r *connReport) lastErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// unreachable is the error of giving up after Options.ConnectTimeout. If
// no warning was logged yet (the time ran out in the first attempt), it
// logs one, so every protocol says once what failed.
func (r *connReport) unreachable(err error) error {
	if err == nil {
		err = &dialError{addr: r.addr, err: fmt.Errorf("no connection within %s", r.timeout)}
	}
	r.mu.Lock()
	first := !r.reported
	r.reported = true
	r.mu.Unlock()
	if first {
		r.log.Warn("couldn't connect to the broker; giving up", "broker", r.addr, "error", err, "check", unreachableHint)
	}
	return fmt.Errorf("%w: no connection to %s within %s (%s): %w", ErrUnreachable, r.addr, r.timeout, unreachableHint, err)
}

// pinTLS makes tc verify the broker's leaf certificate by its SHA-256
// fingerprint pin instead of by a CA (when pin is set).
func pinTLS(tc *tls.Config, pin []byte) {
	if len(pin) == 0 {
		return
	}
	tc.InsecureSkipVerify = true //nolint:gosec // verified by VerifyConnection against the pin
	tc.RootCAs = nil
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: the broker sent no certificate", ErrPinMismatch)
		}
		raw := cs.PeerCertificates[0].Raw
		sum := sha256.Sum256(raw)
		if subtle.ConstantTimeCompare(sum[:], pin) != 1 {
			return fmt.Errorf("%w: the broker's is %s", ErrPinMismatch, certs.Fingerprint(raw))
		}
		return nil
	}
}
