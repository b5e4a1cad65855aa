// Package topic validates MQTT-style topic names and filters and matches them.
//
// A topic name is a '/'-separated list of levels, e.g. "sensors/kitchen/temp".
// A filter may also contain the wildcards '+' (exactly one level) and '#' (any
// number of levels, including none, only as the last level). As in MQTT, a
// topic whose first level starts with '$' (e.g. "$SYS/uptime") is not matched
// by a filter whose first level is a wildcard.
//
// As in MQTT, every level may be empty ("/TopicA", "a//b", "a/") and any
// string of valid UTF-8 without NUL is a level, "." and ".." included: a
// topic is not a path. Only the limits (length, number of levels) and the
// wildcard rules restrict names and filters; quiot's HTTP API carries each
// topic as one percent-encoded path segment (docs/pubsub.md).
package topic

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Default limits of topics and filters, the same for HTTP/3 and MQTT
// (docs/pubsub.md, docs/mqtt.md).
const (
	// DefaultMaxLength is the default maximum length of a topic or filter in bytes.
	DefaultMaxLength = 256
	// DefaultMaxLevels is the default maximum number of levels.
	DefaultMaxLevels = 16
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid topic")

// Limits bounds topic names and filters. A zero field means its default.
type Limits struct {
	// MaxLength is the maximum length in bytes; zero means DefaultMaxLength.
	MaxLength int
	// MaxLevels is the maximum number of levels; zero means DefaultMaxLevels.
	MaxLevels int
}

func (l Limits) maxLength() int {
	if l.MaxLength <= 0 {
		return DefaultMaxLength
	}
	return l.MaxLength
}

func (l Limits) maxLevels() int {
	if l.MaxLevels <= 0 {
		return DefaultMaxLevels
	}
	return l.MaxLevels
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// check runs the checks shared by names and filters.
func (l Limits) check(what, s string) error {
	if s == "" {
		return invalid("empty %s", what)
	}
	if len(s) > l.maxLength() {
		return invalid("%s is %d bytes, longer than %d", what, len(s), l.maxLength())
	}
	if !utf8.ValidString(s) {
		return invalid("%s is not valid UTF-8", what)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalid("%s contains NUL", what)
	}
	if n := strings.Count(s, "/") + 1; n > l.maxLevels() {
		return invalid("%s has %d levels, more than %d", what, n, l.maxLevels())
	}
	return nil
}

// ValidateName checks a topic name, as used to publish: not empty, no
// wildcards, within the limits. Empty levels are allowed, as in MQTT.
func (l Limits) ValidateName(s string) error {
	if err := l.check("topic", s); err != nil {
		return err
	}
	if strings.ContainsAny(s, "+#") {
		return invalid("topic %q contains a wildcard (+ or #)", s)
	}
	return nil
}

// ValidateFilter checks a subscription filter: not empty, wildcards only as
// whole levels, '#' only last, within the limits. Empty levels are allowed,
// as in MQTT.
func (l Limits) ValidateFilter(s string) error {
	if err := l.check("filter", s); err != nil {
		return err
	}
	levels := strings.Split(s, "/")
	for i, lev := range levels {
		switch {
		case lev == "#":
			if i != len(levels)-1 {
				return invalid("filter %q has # before its last level", s)
			}
		case lev == "+":
		case strings.ContainsAny(lev, "+#"):
			return invalid("filter %q has a wildcard inside level %q", s, lev)
		}
	}
	return nil
}

// ValidateName checks a topic name with the default limits.
func ValidateName(s string) error { return Limits{}.ValidateName(s) }

// ValidateFilter checks a filter with the default limits.
func ValidateFilter(s string) error { return Limits{}.ValidateFilter(s) }

// IsFilter reports whether s contains a wildcard level.
func IsFilter(s string) bool { return strings.ContainsAny(s, "+#") }

// Match reports whether the (valid) filter matches the (valid) topic name.
// Leading wildcards do not match topics starting with '$'.
func Match(filter, name string) bool {
	if len(name) > 0 && name[0] == '$' && len(filter) > 0 && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := cut(filter)
		if fl == "#" {
			return true
		}
		nl, nrest, nmore := cut(name)
		if fl != "+" && fl != nl {
			return false
		}
		if !fmore || !nmore {
			// One side ended: match only if both ended, or the filter
			// continues with a final "#" ("a/#" matches "a").
			return fmore == nmore || (fmore && !nmore && frest == "#")
		}
		filter, name = frest, nrest
	}
}

// Covers reports whether every topic matched by filter sub is also matched by
// filter super (both valid). The ACL uses it to decide whether a subscription
// stays within a permitted pattern.
func Covers(super, sub string) bool {
	if len(sub) > 0 && sub[0] == '$' && len(super) > 0 && (super[0] == '+' || super[0] == '#') {
		return false
	}
	for {
		pl, prest, pmore := cut(super)
		if pl == "#" {
			return true
		}
		sl, srest, smore := cut(sub)
		switch {
		case sl == "#":
			return false
		case pl == "+":
		case pl != sl:
			return false
		}
		if !pmore || !smore {
			return pmore == smore || (pmore && !smore && prest == "#")
		}
		super, sub = prest, srest
	}
}

// cut splits off the first level.
func cut(s string) (level, rest string, more bool) {
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}
