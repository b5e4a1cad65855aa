package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// DefaultCost is the bcrypt cost of new passwords: about 5-7 ms on an
// x86-64 host core and an estimated 40-75 ms on a Raspberry Pi Zero
// (ARMv6, 1 GHz), under the ~100 ms a device may spend on one
// authentication.
// Passwords that `quiot passwd` makes are random (144 bits), so the cost
// only matters for passwords people choose; docs/security.md has the
// measurements.
const DefaultCost = 6

// TokenPrefix starts every token NewToken makes, so that secret scanners
// and people recognise one.
const TokenPrefix = "qt_"

func randomFill(b []byte) {
	// crypto/rand.Read never returns an error (it crashes the program
	// when the system's source fails).
	_, _ = rand.Read(b)
}

// NewToken makes a random 256-bit bearer token and its [[token]] entry
// (only the SHA-256 of the token). Show the token once; it is not stored.
func NewToken(user string, expires time.Time, note string) (secret string, t Token) {
	var b [32]byte
	randomFill(b[:])
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	k := tokenKey(secret)
	return secret, Token{User: user, SHA256: hex.EncodeToString(k[:]), Expires: expires, Note: note}
}

// RandomPassword returns a random password of 144 bits (24 characters of
// URL-safe base64).
func RandomPassword() string {
	var b [18]byte
	randomFill(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// NewPassword hashes secret with bcrypt at cost (0 means DefaultCost) into
// a [[password]] entry. bcrypt uses at most 72 bytes of a password: longer
// ones are refused.
func NewPassword(user, secret string, cost int, expires time.Time, note string) (Password, error) {
	if cost == 0 {
		cost = DefaultCost
	}
	if secret == "" {
		return Password{}, errors.New("empty password")
	}
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return Password{}, fmt.Errorf("bcrypt cost %d out of range %d..%d", cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(secret), cost)
	if err != nil {
		return Password{}, fmt.Errorf("couldn't hash password: %w", err)
	}
	return Password{User: user, Hash: string(h), Expires: expires, Note: note}, nil
}

func checkBcrypt(h string) error {
	if !strings.HasPrefix(h, "$2a$") && !strings.HasPrefix(h, "$2b$") && !strings.HasPrefix(h, "$2y$") {
		return errors.New("hash must be a bcrypt hash ($2a$, $2b$ or $2y$; 'quiot passwd' writes it)")
	}
	if _, err := bcrypt.Cost([]byte(h)); err != nil {
		return fmt.Errorf("bad bcrypt hash: %w", err)
	}
	return nil
}

// dummyHash is what Basic verifies against for unknown users (made on
// first use: a Pi spends tens of milliseconds on it).
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("quiot dummy password"), DefaultCost)
	return h
})

func (v *verifier) cacheKey(c *credential, pass string) [32]byte {
	m := hmac.New(sha256.New, v.key[:])
	m.Write([]byte(c.user.name))
	m.Write([]byte{0})
	m.Write([]byte(c.key))
	m.Write([]byte{0})
	m.Write([]byte(pass))
	var k [32]byte
	m.Sum(k[:0])
	return k
}

// check verifies pass against c, remembering successes.
func (v *verifier) check(c *credential, pass string) bool {
	if c.bcrypt == nil {
		return subtle.ConstantTimeCompare([]byte(c.plain), []byte(pass)) == 1
	}
	k := v.cacheKey(c, pass)
	v.mu.Lock()
	_, ok := v.good[k]
	v.mu.Unlock()
	if ok {
		return true
	}
	v.sem <- struct{}{}
	v.hashed.Add(1)
	err := bcrypt.CompareHashAndPassword(c.bcrypt, []byte(pass))
	<-v.sem
	if err != nil {
		return false
	}
	v.mu.Lock()
	if len(v.good) >= maxCached {
		clear(v.good)
	}
	v.good[k] = struct{}{}
	v.mu.Unlock()
	return true
}

func (v *verifier) dummy(pass string) {
	v.sem <- struct{}{}
	_ = bcrypt.CompareHashAndPassword(dummyHash(), []byte(pass))
	<-v.sem
}
