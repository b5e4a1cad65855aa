package cluster

import (
	"errors"
	"fmt"
	"strings"
)

// Topic names map to NATS subjects level by level: the MQTT separator `/`
// becomes NATS's `.`, and each level becomes one NATS token in which every
// byte outside [A-Za-z0-9_-] is escaped as `=XX` (two upper-case hex
// digits). An empty level becomes the token `=`. So `.`, `*`, `>`, spaces,
// `$`, `=` and every non-ASCII byte are escaped, every token is non-empty
// and free of NATS's special characters, and the result is also a valid
// JetStream key-value key (the retained bucket's key is the same string).
// The mapping is reversible for every topic, and canonical: a subject that
// decodes always re-encodes to itself.

const escapeChar = '='

// keep reports whether byte c stands for itself in a token.
func keep(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

const hexDigits = "0123456789ABCDEF"

// encodeLevel appends the token of one topic level.
func encodeLevel(b *strings.Builder, level string) {
	if level == "" {
		b.WriteByte(escapeChar)
		return
	}
	for i := 0; i < len(level); i++ {
		c := level[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(escapeChar)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}

// EncodeTopic returns the subject tokens of a topic name (without the
// prefix): levels joined by `.`.
func EncodeTopic(topic string) string {
	var b strings.Builder
	b.Grow(len(topic) + 8)
	for i, level := range strings.Split(topic, "/") {
		if i > 0 {
			b.WriteByte('.')
		}
		encodeLevel(&b, level)
	}
	return b.String()
}

// ErrBadSubject is returned by DecodeTopic for a subject that no topic
// encodes to.
var ErrBadSubject = errors.New("bad cluster subject")

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// DecodeTopic returns the topic name whose tokens (EncodeTopic) s is.
func DecodeTopic(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrBadSubject)
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, tok := range strings.Split(s, ".") {
		if i > 0 {
			b.WriteByte('/')
		}
		if tok == string(escapeChar) {
			continue // empty level
		}
		if tok == "" {
			return "", fmt.Errorf("%w: empty token in %q", ErrBadSubject, s)
		}
		for j := 0; j < len(tok); j++ {
			c := tok[j]
			if keep(c) {
				b.WriteByte(c)
				continue
			}
			if c != escapeChar || j+2 >= len(tok) {
				return "", fmt.Errorf("%w: byte %q at %d of token %q", ErrBadSubject, c, j, tok)
			}
			hi, ok1 := unhex(tok[j+1])
			lo, ok2 := unhex(tok[j+2])
			v := hi<<4 | lo
			if !ok1 || !ok2 || keep(v) {
				return "", fmt.Errorf("%w: bad escape %q in token %q", ErrBadSubject, tok[j:j+3], tok)
			}
			b.WriteByte(v)
			j += 2
		}
	}
	return b.String(), nil
}

// FilterSubjects returns the NATS subjects (without the prefix) that
// together receive every topic an MQTT filter matches: `+` becomes `*`, a
// trailing `#` becomes `>` plus the parent itself (MQTT's `a/#` matches `a`).
// NATS wildcards also match topics starting with `$` that MQTT's leading
// wildcards do not; the broker's own matching drops those.
func FilterSubjects(filter string) []string {
	levels := strings.Split(filter, "/")
	var b strings.Builder
	hash := levels[len(levels)-1] == "#"
	if hash {
		levels = levels[:len(levels)-1]
	}
	for i, level := range levels {
		if i > 0 {
			b.WriteByte('.')
		}
		if level == "+" {
			b.WriteByte('*')
			continue
		}
		encodeLevel(&b, level)
	}
	parent := b.String()
	if !hash {
		return []string{parent}
	}
	if parent == "" {
		return []string{">"}
	}
	return []string{parent, parent + ".>"}
}

// subjectsCollide reports whether two NATS subject patterns (tokens, `*`,
// a final `>`) match a subject in common.
func subjectsCollide(a, b string) bool {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(ta) && i == len(tb):
			return true
		case i == len(ta) || i == len(tb):
			return false
		case ta[i] == ">" || tb[i] == ">":
			return true
		case ta[i] != "*" && tb[i] != "*" && ta[i] != tb[i]:
			return false
		}
	}
}

// subjectCovers reports whether every subject b matches, a matches too.
func subjectCovers(a, b string) bool {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(ta):
			return i == len(tb)
		case ta[i] == ">":
			return i < len(tb)
		case i == len(tb):
			return false
		case tb[i] == ">":
			return false
		case ta[i] != "*" && (tb[i] == "*" || ta[i] != tb[i]):
			return false
		}
	}
}

// disjointSubjects reduces subjects to patterns no two of which match a
// common subject (what a JetStream consumer's filter requires): a pattern
// another one covers is dropped. ok is false when two that remain still
// collide (then a filter cannot say it: read everything).
func disjointSubjects(subjects []string) (out []string, ok bool) {
	for i, s := range subjects {
		covered := false
		for j, o := range subjects {
			if i != j && subjectCovers(o, s) && (!subjectCovers(s, o) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if subjectsCollide(out[i], out[j]) {
				return nil, false
			}
		}
	}
	return out, true
}
