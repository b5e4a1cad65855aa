// Package auth holds the broker's identities and access-control list, shared
// by the HTTP/3 pub-sub protocol and MQTT over QUIC.
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
//	token     = "s3cr3t-token"         # Authorization: Bearer <token>
//	password  = "pw"                   # Authorization: Basic name:pw (and MQTT username/password)
//	publish   = ["sensors/%u/#"]       # %u is replaced by the identity
//	subscribe = ["cmd/%u/#", "$SYS/#"]
//
// Patterns are MQTT filters. A publish is allowed when a publish pattern
// matches the topic; a subscription when a subscribe pattern covers every
// topic the requested filter can match. A client authenticated by a
// certificate whose CN has no [[user]] entry gets the anonymous rules if
// [anonymous] exists, otherwise nothing.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"

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

// Rules are the publish and subscribe patterns of one identity.
type Rules struct {
	Publish   []string `toml:"publish"`
	Subscribe []string `toml:"subscribe"`
}

// User is one [[user]] entry.
type User struct {
	Name     string `toml:"name"`
	Token    string `toml:"token"`
	Password string `toml:"password"`
	Rules
}

// File is the decoded ACL file.
type File struct {
	Anonymous *Rules `toml:"anonymous"`
	Users     []User `toml:"user"`
}

// Authenticator checks credentials and authorises actions. A nil
// *Authenticator, or one made by Open, lets everyone (including anonymous
// clients) publish and subscribe everywhere.
type Authenticator struct {
	open      bool
	anonymous *Rules
	users     map[string]*User
	tokens    map[[32]byte]*User
}

// Open returns an authenticator that allows everything to everyone.
func Open() *Authenticator { return &Authenticator{open: true} }

// Load reads an ACL file.
func Load(path string) (*Authenticator, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("couldn't read auth file: %w", err)
	}
	a, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	return a, nil
}

// Parse decodes an ACL file's contents and checks every entry.
func Parse(b []byte) (*Authenticator, error) {
	var f File
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("unknown key %q", und[0].String())
	}
	return New(f)
}

// New builds an authenticator from a decoded file.
func New(f File) (*Authenticator, error) {
	a := &Authenticator{anonymous: f.Anonymous, users: map[string]*User{}, tokens: map[[32]byte]*User{}}
	if f.Anonymous != nil {
		if err := checkRules("[anonymous]", f.Anonymous); err != nil {
			return nil, err
		}
	}
	for i := range f.Users {
		u := &f.Users[i]
		where := fmt.Sprintf("user %d", i+1)
		if u.Name == "" {
			return nil, fmt.Errorf("%s: missing name", where)
		}
		where = fmt.Sprintf("user %q", u.Name)
		if _, dup := a.users[u.Name]; dup {
			return nil, fmt.Errorf("%s: duplicate name", where)
		}
		if strings.ContainsAny(u.Name, ":/+#") {
			return nil, fmt.Errorf("%s: name must not contain ':', '/', '+' or '#'", where)
		}
		if err := checkRules(where, &u.Rules); err != nil {
			return nil, err
		}
		if u.Token != "" {
			k := sha256.Sum256([]byte(u.Token))
			if _, dup := a.tokens[k]; dup {
				return nil, fmt.Errorf("%s: token already used by another user", where)
			}
			a.tokens[k] = u
		}
		a.users[u.Name] = u
	}
	return a, nil
}

func checkRules(where string, r *Rules) error {
	for _, list := range [][]string{r.Publish, r.Subscribe} {
		for _, p := range list {
			if err := topic.ValidateFilter(strings.ReplaceAll(p, "%u", "u")); err != nil {
				return fmt.Errorf("%s: pattern %q: %w", where, p, err)
			}
		}
	}
	return nil
}

// ErrDenied is returned (wrapped) by Check when an action is not allowed.
var ErrDenied = errors.New("not allowed")

// Anonymous reports whether clients without credentials are accepted.
func (a *Authenticator) Anonymous() bool {
	return a == nil || a.open || a.anonymous != nil
}

// IsOpen reports whether the authenticator allows everything (no ACL file).
func (a *Authenticator) IsOpen() bool { return a == nil || a.open }

// Token returns the identity owning a bearer token.
func (a *Authenticator) Token(tok string) (id string, ok bool) {
	if a == nil || a.open || tok == "" {
		return "", false
	}
	u, ok := a.tokens[sha256.Sum256([]byte(tok))]
	if !ok {
		return "", false
	}
	return u.Name, true
}

// Basic checks a user name and password.
func (a *Authenticator) Basic(user, pass string) (id string, ok bool) {
	if a == nil || a.open {
		return "", false
	}
	u, ok := a.users[user]
	if !ok || u.Password == "" {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(u.Password), []byte(pass)) != 1 {
		return "", false
	}
	return u.Name, true
}

// Known reports whether id names a configured user.
func (a *Authenticator) Known(id string) bool {
	if a == nil || a.open {
		return true
	}
	_, ok := a.users[id]
	return ok
}

func (a *Authenticator) rules(id string) *Rules {
	if id != "" {
		if u, ok := a.users[id]; ok {
			return &u.Rules
		}
	}
	return a.anonymous
}

// Allow reports whether identity id ("" = anonymous) may do action on t: a
// topic name for Publish, a filter for Subscribe.
func (a *Authenticator) Allow(id string, action Action, t string) bool {
	if a == nil || a.open {
		return true
	}
	r := a.rules(id)
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

// Check is Allow returning an error that wraps ErrDenied.
func (a *Authenticator) Check(id string, action Action, t string) error {
	if a.Allow(id, action, t) {
		return nil
	}
	who := id
	if who == "" {
		who = "anonymous"
	}
	return fmt.Errorf("%w: %s may not %s %q", ErrDenied, who, action, t)
}
