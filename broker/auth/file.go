package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/quiot/quiot/internal/topic"
)

// Rules are the publish and subscribe patterns of one identity.
type Rules struct {
	Publish   []string `toml:"publish"`
	Subscribe []string `toml:"subscribe"`
}

// User is one [[user]] entry.
type User struct {
	Name string `toml:"name"`
	// Token and Password are plain-text credentials of older files:
	// accepted with a warning; new files keep [[token]] and [[password]]
	// hashes instead.
	Token    string `toml:"token"`
	Password string `toml:"password"`
	Rules
}

// Token is one [[token]] entry: the SHA-256 of a random bearer token.
type Token struct {
	User string `toml:"user"`
	// SHA256 is the hex SHA-256 of the token's text.
	SHA256 string `toml:"sha256"`
	// Expires, when set, is the end of the token's validity.
	Expires time.Time `toml:"expires"`
	// Note is free text (who, when, what for).
	Note string `toml:"note"`
}

// Password is one [[password]] entry: a bcrypt hash.
type Password struct {
	User string `toml:"user"`
	// Hash is the bcrypt hash ($2a$, $2b$ or $2y$).
	Hash string `toml:"hash"`
	// Expires, when set, is the end of the password's validity.
	Expires time.Time `toml:"expires"`
	// Note is free text.
	Note string `toml:"note"`
}

// File is the decoded ACL file.
type File struct {
	Anonymous *Rules     `toml:"anonymous"`
	Users     []User     `toml:"user"`
	Tokens    []Token    `toml:"token"`
	Passwords []Password `toml:"password"`
}

// Decode parses an ACL file's TOML; unknown keys are errors. New checks
// the entries.
func Decode(b []byte) (File, error) {
	var f File
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return File{}, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		return File{}, fmt.Errorf("unknown key %q", und[0].String())
	}
	return f, nil
}

// state is one loaded ACL (immutable once stored).
type state struct {
	gen       uint64
	loaded    time.Time
	file      File
	anonymous *Rules
	users     map[string]*user
	tokens    map[[32]byte]*credential
	// restricted maps an identity ("" = anonymous) to the last generation
	// in which it lost a right or a credential.
	restricted map[string]uint64
	warnings   []string
}

type user struct {
	name      string
	rules     Rules
	tokens    []*credential
	passwords []*credential
}

type credential struct {
	user *user
	// key names the credential across reloads: "token:<sha256>" or
	// "password:<hash>" ("plain-password:<sha256>" for plain text).
	key     string
	bcrypt  []byte // password hash; nil for tokens and plain passwords
	plain   string // plain-text password of an old file
	expires time.Time
}

func (c *credential) expired(now time.Time) bool {
	return !c.expires.IsZero() && !now.Before(c.expires)
}

func tokenKey(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }

func (s *state) rules(id string) *Rules {
	if id != "" {
		// An identity without a [[user]] entry (a removed user, a
		// certificate CN never added) has no rules: never [anonymous]'s,
		// which would keep it its %u rights.
		if u, ok := s.users[id]; ok {
			return &u.rules
		}
		return nil
	}
	return s.anonymous
}

// build checks f and makes its state.
func build(f File, now time.Time) (*state, error) {
	s := &state{loaded: now, file: f, anonymous: f.Anonymous, users: map[string]*user{}, tokens: map[[32]byte]*credential{}, restricted: map[string]uint64{}}
	if f.Anonymous != nil {
		if err := checkRules("[anonymous]", f.Anonymous); err != nil {
			return nil, err
		}
	}
	addToken := func(where string, u *user, k [32]byte, expires time.Time) error {
		if _, dup := s.tokens[k]; dup {
			return fmt.Errorf("%s: token already used (by %s or another user)", where, u.name)
		}
		c := &credential{user: u, key: "token:" + hex.EncodeToString(k[:]), expires: expires}
		s.tokens[k] = c
		u.tokens = append(u.tokens, c)
		return nil
	}
	for i := range f.Users {
		fu := &f.Users[i]
		where := fmt.Sprintf("user %d", i+1)
		if fu.Name == "" {
			return nil, fmt.Errorf("%s: missing name", where)
		}
		where = fmt.Sprintf("user %q", fu.Name)
		if _, dup := s.users[fu.Name]; dup {
			return nil, fmt.Errorf("%s: duplicate name", where)
		}
		if err := ValidIdentity(fu.Name); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if strings.Contains(fu.Name, ":") {
			return nil, fmt.Errorf("%s: name must not contain ':' (HTTP Basic separates user and password with it)", where)
		}
		if err := checkRules(where, &fu.Rules); err != nil {
			return nil, err
		}
		u := &user{name: fu.Name, rules: fu.Rules}
		s.users[u.name] = u
		if fu.Token != "" {
			if err := addToken(where, u, tokenKey(fu.Token), time.Time{}); err != nil {
				return nil, err
			}
			s.warnings = append(s.warnings, fmt.Sprintf("%s: plain-text token in the ACL file (anyone who can read the file can use it): run 'quiot passwd --convert --acl FILE' to keep only its hash", where))
		}
		if fu.Password != "" {
			h := sha256.Sum256([]byte(fu.Password))
			u.passwords = append(u.passwords, &credential{user: u, key: "plain-password:" + hex.EncodeToString(h[:]), plain: fu.Password})
			s.warnings = append(s.warnings, fmt.Sprintf("%s: plain-text password in the ACL file (anyone who can read the file can use it): run 'quiot passwd --convert --acl FILE' to keep only its bcrypt hash", where))
		}
	}
	for i, t := range f.Tokens {
		where := fmt.Sprintf("token %d (user %q)", i+1, t.User)
		u := s.users[t.User]
		if u == nil {
			return nil, fmt.Errorf("%s: no [[user]] named %q", where, t.User)
		}
		raw, err := hex.DecodeString(t.SHA256)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%s: sha256 must be 64 hex digits (the SHA-256 of the token; 'quiot token' writes it)", where)
		}
		if err := addToken(where, u, [32]byte(raw), t.Expires); err != nil {
			return nil, err
		}
	}
	for i, p := range f.Passwords {
		where := fmt.Sprintf("password %d (user %q)", i+1, p.User)
		u := s.users[p.User]
		if u == nil {
			return nil, fmt.Errorf("%s: no [[user]] named %q", where, p.User)
		}
		if err := checkBcrypt(p.Hash); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		u.passwords = append(u.passwords, &credential{user: u, key: "password:" + p.Hash, bcrypt: []byte(p.Hash), expires: p.Expires})
	}
	return s, nil
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

// restrict records in next.restricted (carried over from prev) each
// identity that lost a right or a credential from prev to next: a removed
// user, a removed pattern, a removed or expired credential, a removed
// [anonymous], and any identity that got its own [[user]] entry (it had
// the anonymous rules).
func restrict(prev, next *state) {
	for id, g := range prev.restricted {
		next.restricted[id] = g
	}
	mark := func(id string) { next.restricted[id] = next.gen }
	if prev.anonymous != nil && (next.anonymous == nil || lostRules(prev.anonymous, next.anonymous)) {
		mark("")
	}
	for name, pu := range prev.users {
		nu := next.users[name]
		if nu == nil || lostRules(&pu.rules, &nu.rules) || lostCreds(pu, prev.loaded, nu, next.loaded) {
			mark(name)
		}
	}
	for name := range next.users {
		if prev.users[name] == nil {
			mark(name)
		}
	}
}

func lostRules(prev, next *Rules) bool {
	return !subset(prev.Publish, next.Publish) || !subset(prev.Subscribe, next.Subscribe)
}

func subset(a, b []string) bool {
	have := make(map[string]bool, len(b))
	for _, p := range b {
		have[p] = true
	}
	for _, p := range a {
		if !have[p] {
			return false
		}
	}
	return true
}

func lostCreds(prev *user, prevAt time.Time, next *user, nextAt time.Time) bool {
	valid := func(u *user, at time.Time) map[string]bool {
		m := map[string]bool{}
		for _, list := range [][]*credential{u.tokens, u.passwords} {
			for _, c := range list {
				if !c.expired(at) {
					m[c.key] = true
				}
			}
		}
		return m
	}
	now := valid(next, nextAt)
	for k := range valid(prev, prevAt) {
		if !now[k] {
			return true
		}
	}
	return false
}
