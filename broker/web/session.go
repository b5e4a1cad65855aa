package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A session token is
//
//	qs1.<base64url(identity)>.<expiry, Unix seconds>.<ACL generation>.<base64url(HMAC-SHA256)>
//
// the MAC covering everything before its dot. It carries no secret: the
// identity is readable, the MAC makes it unforgeable without the key. The
// ACL generation (auth.Authenticator.Generation when it was issued) lets a
// reload that takes rights or credentials away from the identity end its
// tokens (auth.Authenticator.StillValid).

const tokenPrefix = "qs1."

// Errors of ParseToken and verification.
var (
	// ErrTokenMalformed: not a session token.
	ErrTokenMalformed = errors.New("malformed session token")
	// ErrTokenExpired: the token's expiry has passed.
	ErrTokenExpired = errors.New("session token expired")
	// ErrTokenSignature: the MAC does not match (another key, or altered).
	ErrTokenSignature = errors.New("session token signature invalid")
	// ErrTokenRevoked: an ACL reload after the token was issued took
	// rights or credentials away from its identity.
	ErrTokenRevoked = errors.New("session token ended by an ACL reload that changed its identity's rights")
	// ErrTokenLoggedOut: the token was ended by DELETE /v1/session.
	ErrTokenLoggedOut = errors.New("session token ended by a log-out (DELETE /v1/session)")
)

// Token is a parsed (not yet verified) session token.
type Token struct {
	// Identity is the ACL identity ("" = anonymous).
	Identity string
	// Expires is the expiry.
	Expires time.Time
	// Generation is the ACL generation the token was issued under.
	Generation uint64
	// signed is the part the MAC covers; mac the MAC.
	signed string
	mac    []byte
}

// looksLikeToken tells a session token from an ACL bearer token cheaply.
func looksLikeToken(s string) bool { return strings.HasPrefix(s, tokenPrefix) }

// ParseToken splits a session token without checking its MAC or expiry.
func ParseToken(s string) (Token, error) {
	if len(s) > 1024 {
		return Token{}, fmt.Errorf("%w: longer than 1024 bytes", ErrTokenMalformed)
	}
	if !looksLikeToken(s) {
		return Token{}, fmt.Errorf("%w: no %q prefix", ErrTokenMalformed, tokenPrefix)
	}
	parts := strings.Split(s[len(tokenPrefix):], ".")
	if len(parts) != 4 {
		return Token{}, fmt.Errorf("%w: want 5 dot-separated parts", ErrTokenMalformed)
	}
	id, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return Token{}, fmt.Errorf("%w: identity: %v", ErrTokenMalformed, err)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || exp <= 0 {
		return Token{}, fmt.Errorf("%w: expiry %q", ErrTokenMalformed, parts[1])
	}
	gen, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("%w: generation %q", ErrTokenMalformed, parts[2])
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(mac) != sha256.Size {
		return Token{}, fmt.Errorf("%w: signature", ErrTokenMalformed)
	}
	return Token{Identity: string(id), Expires: time.Unix(exp, 0), Generation: gen, signed: s[:len(s)-len(parts[3])-1], mac: mac}, nil
}

// signer signs and verifies session tokens with one key.
type signer struct{ key []byte }

func (s signer) mac(msg string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// sign makes a token for id that expires at exp, issued under ACL
// generation gen.
func (s signer) sign(id string, exp time.Time, gen uint64) string {
	body := tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + strconv.FormatInt(exp.Unix(), 10) + "." + strconv.FormatUint(gen, 10)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
}

// verify checks a token's MAC and expiry at now and returns it.
func (s signer) verify(tok string, now time.Time) (Token, error) {
	t, err := ParseToken(tok)
	if err != nil {
		return Token{}, err
	}
	if !hmac.Equal(t.mac, s.mac(t.signed)) {
		return Token{}, ErrTokenSignature
	}
	if !now.Before(t.Expires) {
		return Token{}, fmt.Errorf("%w at %s", ErrTokenExpired, t.Expires.UTC().Format(time.RFC3339))
	}
	return t, nil
}
