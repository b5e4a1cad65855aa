// Package auth holds the broker's identities and access-control list, shared
// by the HTTP/3 pub-sub protocol and MQTT over QUIC. Allow (and Check) is the
// one authorization function every message path calls.
//
// # Modes
//
// An Authenticator runs in one of three modes:
//
//   - loopback only (LoopbackOnly, and a nil *Authenticator): no ACL file;
//     clients connecting from a loopback address may do everything, every
//     other client is refused at connection (Admit). This is the broker's
//     default, as in mosquitto 2.x.
//   - open (Open): no ACL file, everyone from anywhere may do everything
//     (`quiot broker --dev` or --allow-anonymous).
//   - ACL (Load, Parse, New): the ACL file decides.
//
// # The ACL file
//
// An ACL file is TOML:
//
//	# Who may connect without credentials, and what they may do.
//	# Leave the section out to refuse anonymous clients.
//	[anonymous]
//	publish   = ["public/#"]
//	subscribe = ["public/#"]
//
//	[[user]]
//	name      = "sensor-1"             # identity; also the mTLS certificate CN
//	publish   = ["sensors/%u/#"]       # %u is replaced by the identity
//	subscribe = ["cmd/%u/#"]
//
//	# Credentials: only hashes, written by `quiot token` and `quiot passwd`.
//	[[token]]                          # Authorization: Bearer <token>; MQTT password
//	user    = "sensor-1"
//	sha256  = "<hex SHA-256 of the token>"
//	expires = 2027-06-30T00:00:00Z     # optional
//
//	[[password]]                       # Authorization: Basic; MQTT username/password
//	user    = "sensor-1"
//	hash    = "$2a$06$..."             # bcrypt
//
// Patterns are MQTT filters. A publish is allowed when a publish pattern
// matches the topic; a subscription when a subscribe pattern covers every
// topic the requested filter can match. A client certificate whose CN has
// no [[user]] entry is refused (CertificateIdentity): removing the entry
// revokes the certificate, even when [anonymous] exists; an identity
// without an entry is allowed nothing. An identity must be one topic
// level (certs.ValidateName): one holding '+', '#', '/', NUL or a leading
// '$' is refused at authentication and never matches a pattern.
//
// Plain-text credentials (token = "..." or password = "..." inside a
// [[user]]) from older files are still accepted, each with a warning
// (Warnings); `quiot passwd --convert --acl FILE` replaces them by hashes.
//
// # Reload
//
// Reload re-reads the file in place: every caller holding the
// *Authenticator sees the new rules at its next call. Generation, Changed
// and StillValid let the protocols close the connections whose rights a
// reload removed and keep the others.
package auth

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/safefile"
	"github.com/quiot/quiot/internal/topic"
)

// Action is what an identity wants to do with a topic.
type Action int

const (
	// Publish is publishing to a topic name.
	Publish Action = iota + 1
	// Subscribe is subscribing to a filter.
	Subscribe
)

// String names the action.
func (a Action) String() string {
	switch a {
	case Publish:
		return "publish"
	case Subscribe:
		return "subscribe"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

type mode uint8

const (
	modeLoopback mode = iota // the zero value: deny by default
	modeOpen
	modeACL
)

// Authenticator checks credentials and authorises actions. It is safe for
// concurrent use; Reload swaps its rules atomically. A nil *Authenticator
// behaves as LoopbackOnly.
type Authenticator struct {
	mode mode
	path string // file Load read; "" when built from bytes or a File
	now  func() time.Time

	st atomic.Pointer[state]

	mu      sync.Mutex    // serialises reloads
	changed chan struct{} // closed by the next reload; guarded by mu

	verify verifier
	// thr throttles wrong passwords per source address (BasicFrom).
	thr atomic.Pointer[throttle]
}

// Open returns an authenticator that lets everyone, from any address,
// publish and subscribe everywhere.
func Open() *Authenticator { return newMode(modeOpen) }

// LoopbackOnly returns the default authenticator of a broker without an ACL
// file: clients from loopback addresses (127.0.0.0/8, ::1) may do
// everything, others are refused by Admit.
func LoopbackOnly() *Authenticator { return newMode(modeLoopback) }

func newMode(m mode) *Authenticator {
	a := &Authenticator{mode: m, changed: make(chan struct{})}
	a.st.Store(&state{users: map[string]*user{}, tokens: map[[32]byte]*credential{}})
	a.verify.init()
	a.thr.Store(newThrottle(DefaultThrottle))
	return a
}

func (a *Authenticator) modeOf() mode {
	if a == nil {
		return modeLoopback
	}
	return a.mode
}

func (a *Authenticator) state() *state { return a.st.Load() }

func (a *Authenticator) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// Load reads an ACL file. Reload re-reads the same file.
func Load(path string) (*Authenticator, error) {
	f, err := readFile(path)
	if err != nil {
		return nil, err
	}
	a, err := New(f)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	a.path = path
	return a, nil
}

// readFile reads and decodes the ACL file at path; a file others could
// have written is refused (safefile.ReadFile: writable by group or
// others, or owned by another user than the broker's or root).
func readFile(path string) (File, error) {
	b, err := safefile.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("couldn't read auth file: %w", err)
	}
	f, err := Decode(b)
	if err != nil {
		return File{}, fmt.Errorf("auth file %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes an ACL file's contents and checks every entry.
func Parse(b []byte) (*Authenticator, error) {
	f, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return New(f)
}

// New builds an authenticator from a decoded file.
func New(f File) (*Authenticator, error) {
	a := newMode(modeACL)
	st, err := build(f, a.clock())
	if err != nil {
		return nil, err
	}
	a.st.Store(st)
	return a, nil
}

// ErrDenied is returned (wrapped) by Check when an action is not allowed,
// and by Admit when a client may not connect.
var ErrDenied = errors.New("not allowed")

// ErrLoopbackOnly is returned (wrapped, with ErrDenied) by Admit for a
// client from a non-loopback address when the broker has no ACL.
var ErrLoopbackOnly = errors.New("this broker has no ACL and serves loopback clients only (start it with --auth FILE; see docs/security.md)")

// Admit decides whether a client from the remote address (host:port, or a
// bare host) may connect at all, before any credential is looked at. A
// broker without an ACL (LoopbackOnly, nil) admits loopback addresses only;
// an address it cannot parse is refused. Open and ACL authenticators admit
// every address (the ACL decides what each identity may do). The error
// wraps ErrDenied and ErrLoopbackOnly, and its text is one line fit for an
// HTTP 403 body or a log.
func (a *Authenticator) Admit(remote string) error {
	if a.modeOf() != modeLoopback {
		return nil
	}
	if IsLoopback(remote) {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrDenied, ErrLoopbackOnly)
}

// IsLoopback reports whether remote (host:port or a bare host, IPv4,
// IPv6 or an IPv4-mapped IPv6 address) is a loopback address.
func IsLoopback(remote string) bool {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}

// Anonymous reports whether clients without credentials are accepted (by
// Open and LoopbackOnly after Admit; with an ACL when it has [anonymous]).
func (a *Authenticator) Anonymous() bool {
	return a.modeOf() != modeACL || a.state().anonymous != nil
}

// IsOpen reports whether there is no ACL: every admitted client may do
// everything (Open, LoopbackOnly and nil).
func (a *Authenticator) IsOpen() bool { return a.modeOf() != modeACL }

// LoopbackOnlyMode reports whether the authenticator refuses non-loopback
// clients (LoopbackOnly and nil).
func (a *Authenticator) LoopbackOnlyMode() bool { return a.modeOf() == modeLoopback }

// ValidIdentity checks that id may be an identity (certs.ValidateName): one
// topic level without wildcards, NUL or a leading '$'.
func ValidIdentity(id string) error { return certs.ValidateName(id) }

// Certificate returns the identity of a client that presented a verified
// certificate with common name cn, or ok false when the client must be
// refused (CertificateIdentity says why).
func (a *Authenticator) Certificate(cn string) (id string, ok bool) {
	id, err := a.CertificateIdentity(cn)
	return id, err == nil
}

// CertificateIdentity returns the identity of a client that presented a
// verified certificate with common name cn, or an error wrapping ErrDenied
// when the client must be refused, never treated as anonymous:
//
//   - cn cannot be an identity (ValidIdentity: a wildcard, '/', NUL...);
//   - with an ACL, cn has no [[user]] entry. Removing a certificate's
//     entry revokes it (docs/security.md): it neither keeps the name's
//     %u rights and client ids nor falls back to [anonymous].
func (a *Authenticator) CertificateIdentity(cn string) (string, error) {
	if err := ValidIdentity(cn); err != nil {
		return "", fmt.Errorf("%w: client certificate: %w", ErrDenied, err)
	}
	if a.modeOf() == modeACL && a.state().users[cn] == nil {
		return "", fmt.Errorf("%w: client certificate: %q has no [[user]] entry in the ACL (revoked or never added)", ErrDenied, cn)
	}
	return cn, nil
}

// Token returns the identity owning a bearer token that has not expired.
func (a *Authenticator) Token(tok string) (id string, ok bool) {
	if a.modeOf() != modeACL || tok == "" {
		return "", false
	}
	c, ok := a.state().tokens[tokenKey(tok)]
	if !ok || c.expired(a.clock()) {
		return "", false
	}
	return c.user.name, true
}

// Basic checks a user name and password against the user's unexpired
// passwords. A bcrypt verification is done once per (user, password, hash)
// and remembered in memory (keyed by an HMAC with a per-process random
// key, never the password) until the next reload, so that clients that
// authenticate every request or reconnect often cost one hash a password.
func (a *Authenticator) Basic(name, pass string) (id string, ok bool) {
	if a.modeOf() != modeACL {
		return "", false
	}
	u := a.state().users[name]
	if u == nil || len(u.passwords) == 0 {
		// Spend the same time as for a known user: the answer must not
		// tell which user names exist.
		a.verify.dummy(pass)
		return "", false
	}
	now := a.clock()
	for _, c := range u.passwords {
		if !c.expired(now) && a.verify.check(c, pass) {
			return u.name, true
		}
	}
	return "", false
}

// Known reports whether id names a configured user (always true without an
// ACL).
func (a *Authenticator) Known(id string) bool {
	if a.modeOf() != modeACL {
		return true
	}
	_, ok := a.state().users[id]
	return ok
}

// ClientIDOwner returns the identity an MQTT client id belongs to: with an
// ACL, a client id equal to the name of a [[user]] entry (the value %u
// takes for that identity) is that user's, and only it may connect with
// it; owned is false for every other client id and without an ACL. An
// identity name is also the natural client id of a device, so another
// identity (anonymous included) connecting first with it would lock the
// device out (docs/security.md).
func (a *Authenticator) ClientIDOwner(cid string) (owner string, owned bool) {
	if a.modeOf() != modeACL || cid == "" {
		return "", false
	}
	if u := a.state().users[cid]; u != nil {
		return u.name, true
	}
	return "", false
}

// Warnings returns the problems of the loaded ACL that do not stop it from
// working (plain-text credentials), one line each, for the start-up log.
func (a *Authenticator) Warnings() []string {
	if a.modeOf() != modeACL {
		return nil
	}
	return a.state().warnings
}

// Allow reports whether identity id ("" = anonymous) may do action on t: a
// topic name for Publish, a filter for Subscribe. It is the one
// authorization decision of the broker: every path a message takes calls
// it (or Check), whatever the protocol. An identity that is not valid
// (ValidIdentity) is allowed nothing, so it never reaches a pattern.
//
// Topics starting with `$` belong to the broker: no client publishes to
// them, in every mode and whatever the ACL says (docs/security.md); a name
// holding a wildcard is no topic name and is not published to either.
func (a *Authenticator) Allow(id string, action Action, t string) bool {
	if action == Publish && brokerOwned(t) {
		return false
	}
	if a.modeOf() != modeACL {
		return true
	}
	if id != "" && ValidIdentity(id) != nil {
		return false
	}
	r := a.state().rules(id)
	if r == nil {
		return false
	}
	var patterns []string
	switch action {
	case Publish:
		patterns = r.Publish
	case Subscribe:
		patterns = r.Subscribe
	default:
		return false
	}
	for _, p := range patterns {
		if strings.Contains(p, "%u") {
			if id == "" {
				continue
			}
			p = strings.ReplaceAll(p, "%u", id)
		}
		if action == Publish && topic.Match(p, t) {
			return true
		}
		if action == Subscribe && topic.Covers(p, t) {
			return true
		}
	}
	return false
}

// brokerOwned reports whether no client may publish to topic name t: it
// starts with `$` (the broker's topics) or holds a wildcard.
func brokerOwned(t string) bool {
	return strings.HasPrefix(t, "$") || strings.ContainsAny(t, "+#")
}

// Check is Allow returning an error that wraps ErrDenied.
func (a *Authenticator) Check(id string, action Action, t string) error {
	if a.Allow(id, action, t) {
		return nil
	}
	who := id
	if who == "" {
		who = "anonymous"
	}
	if action == Publish && strings.HasPrefix(t, "$") {
		return fmt.Errorf("%w: %s may not publish %q: topics starting with $ belong to the broker", ErrDenied, who, t)
	}
	return fmt.Errorf("%w: %s may not %s %q", ErrDenied, who, action, t)
}

// verifier checks passwords with bcrypt, bounded in concurrency and
// remembering successes.
type verifier struct {
	sem chan struct{} // at most one bcrypt per CPU at a time
	key [32]byte      // HMAC key of the success cache (random per process)
	// hashed counts bcrypt verifications (tests check the cache with it).
	hashed atomic.Int64

	mu   sync.Mutex
	good map[[32]byte]struct{}
}

// maxCached bounds the success cache; when full it is emptied.
const maxCached = 1024

func (v *verifier) init() {
	v.sem = make(chan struct{}, runtime.NumCPU())
	randomFill(v.key[:])
	v.good = map[[32]byte]struct{}{}
}

func (v *verifier) forget() {
	v.mu.Lock()
	clear(v.good)
	v.mu.Unlock()
}
