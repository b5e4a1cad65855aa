package auth

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Throttling of wrong passwords (docs/security.md, "Wrong passwords"):
// a source address that sent Throttle.Failures wrong passwords within
// Throttle.Window has its next password attempts refused, without a
// bcrypt, for Throttle.Backoff. IPv6 addresses count by /64 (one host
// holds a whole /64). The table of addresses is bounded by
// Throttle.MaxAddrs.

// Throttle configures the throttling of wrong passwords per source
// address. A zero field takes the field of DefaultThrottle.
type Throttle struct {
	// Failures is the number of wrong passwords one address may send
	// within Window; the attempts after that are refused for Backoff.
	// Negative turns throttling off.
	Failures int
	// Window is the time over which Failures are counted.
	Window time.Duration
	// Backoff is how long an address is refused once it reached Failures.
	Backoff time.Duration
	// MaxAddrs bounds the addresses remembered; when the table is full,
	// entries whose window and backoff are over go first, then others.
	MaxAddrs int
}

// DefaultThrottle is the throttling of an ACL authenticator until
// SetThrottle: 10 wrong passwords a minute per address, then a minute of
// refusals; at most 10000 addresses remembered (about 1 MB).
var DefaultThrottle = Throttle{Failures: 10, Window: time.Minute, Backoff: time.Minute, MaxAddrs: 10000}

// ErrThrottled is returned (wrapped) by BasicFrom for an address in its
// backoff: its password was not checked.
var ErrThrottled = errors.New("too many wrong passwords from this address: try again later")

// ErrBadCredentials is returned by BasicFrom for a wrong user name or
// password.
var ErrBadCredentials = errors.New("bad credentials")

// withDefaults fills the zero fields of t from DefaultThrottle.
func (t Throttle) withDefaults() Throttle {
	if t.Failures == 0 {
		t.Failures = DefaultThrottle.Failures
	}
	if t.Window <= 0 {
		t.Window = DefaultThrottle.Window
	}
	if t.Backoff <= 0 {
		t.Backoff = DefaultThrottle.Backoff
	}
	if t.MaxAddrs <= 0 {
		t.MaxAddrs = DefaultThrottle.MaxAddrs
	}
	return t
}

// throttle is the table of wrong passwords by address.
type throttle struct {
	cfg Throttle

	mu sync.Mutex
	m  map[netip.Addr]*failures
}

// failures are one address's wrong passwords in its current window.
type failures struct {
	n     int
	start time.Time // of the window
	until time.Time // end of the backoff; zero when none
}

func newThrottle(cfg Throttle) *throttle {
	return &throttle{cfg: cfg.withDefaults(), m: map[netip.Addr]*failures{}}
}

// SetThrottle sets the throttling of wrong passwords (zero fields take
// DefaultThrottle's; Failures < 0 turns it off) and forgets the addresses
// counted so far. Reloads keep it.
func (a *Authenticator) SetThrottle(t Throttle) {
	if a == nil {
		return
	}
	a.thr.Store(newThrottle(t))
}

// throttleKey is the address remote is counted under: the IP (IPv4, or
// an IPv4-mapped IPv6 as IPv4) or the /64 of an IPv6 address; ok false
// when remote is no IP address (it is not throttled).
func throttleKey(remote string) (netip.Addr, bool) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err != nil {
			return netip.Addr{}, false
		}
		return p.Addr(), true
	}
	return ip, true
}

// blocked reports whether key is in its backoff at now.
func (t *throttle) blocked(key netip.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.m[key]
	return f != nil && now.Before(f.until)
}

// fail counts a wrong password from key at now.
func (t *throttle) fail(key netip.Addr, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.m[key]
	if f == nil {
		if len(t.m) >= t.cfg.MaxAddrs {
			t.evictLocked(now)
		}
		f = &failures{start: now}
		t.m[key] = f
	}
	if now.Sub(f.start) >= t.cfg.Window {
		f.n, f.start = 0, now
	}
	f.n++
	if f.n >= t.cfg.Failures {
		f.until = now.Add(t.cfg.Backoff)
		f.n, f.start = 0, f.until
	}
}

// evictLocked makes room in a full table: the entries whose window and
// backoff are over go; if none is, one entry chosen by map order goes.
func (t *throttle) evictLocked(now time.Time) {
	for k, f := range t.m {
		if !now.Before(f.until) && now.Sub(f.start) >= t.cfg.Window {
			delete(t.m, k)
		}
	}
	if len(t.m) < t.cfg.MaxAddrs {
		return
	}
	for k := range t.m {
		delete(t.m, k)
		if len(t.m) < t.cfg.MaxAddrs {
			return
		}
	}
}

// size is the number of addresses in the table (tests).
func (t *throttle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// BasicFrom is Basic for a client at remote (host:port or a bare host),
// throttled: an address that sent Throttle.Failures wrong passwords
// within Throttle.Window gets an error wrapping ErrThrottled for
// Throttle.Backoff, without its password being checked (no bcrypt). A
// wrong user name or password returns ErrBadCredentials and counts
// against remote. Every protocol that checks passwords calls it (HTTP
// Basic, the MQTT CONNECT password).
func (a *Authenticator) BasicFrom(remote, name, pass string) (string, error) {
	if a.modeOf() != modeACL {
		return "", ErrBadCredentials
	}
	t := a.thr.Load()
	key, keyed := throttleKey(remote)
	on := t != nil && t.cfg.Failures > 0 && keyed
	if on && t.blocked(key, a.clock()) {
		return "", fmt.Errorf("%w (after %d within %v; refused for %v)", ErrThrottled, t.cfg.Failures, t.cfg.Window, t.cfg.Backoff)
	}
	if id, ok := a.Basic(name, pass); ok {
		return id, nil
	}
	if on {
		t.fail(key, a.clock())
	}
	return "", ErrBadCredentials
}
