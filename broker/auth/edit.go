package auth

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"time"
)

// The functions here edit an ACL file's text for `quiot token` and
// `quiot passwd`: they append entries (comments and layout stay as they
// are) and check that the result loads.

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func credText(kind, user, field, value string, expires time.Time, note string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[%s]]\nuser = %s\n%s = %s\n", kind, tomlString(user), field, tomlString(value))
	if !expires.IsZero() {
		fmt.Fprintf(&b, "expires = %s\n", expires.UTC().Format(time.RFC3339))
	}
	if note != "" {
		fmt.Fprintf(&b, "note = %s\n", tomlString(note))
	}
	return b.String()
}

// TOML returns the text of the [[token]] entry.
func (t Token) TOML() string { return credText("token", t.User, "sha256", t.SHA256, t.Expires, t.Note) }

// TOML returns the text of the [[password]] entry.
func (p Password) TOML() string {
	return credText("password", p.User, "hash", p.Hash, p.Expires, p.Note)
}

// userText is the [[user]] entry Append adds for a new identity: no
// rights until someone gives it patterns.
func userText(name string) string {
	return fmt.Sprintf("\n# %s has no rights yet: add publish and subscribe patterns (MQTT filters, %%u = the identity).\n[[user]]\nname = %s\npublish = []\nsubscribe = []\n", name, tomlString(name))
}

// Append returns src with entry (the TOML text of a Token or Password)
// appended, and a [[user]] entry for name first when the file has none
// (newUser true). The result is checked to load.
func Append(src []byte, name, entry string) (out []byte, newUser bool, err error) {
	if err := ValidIdentity(name); err != nil {
		return nil, false, err
	}
	f, err := Decode(src)
	if err != nil {
		return nil, false, err
	}
	if _, err := New(f); err != nil {
		return nil, false, err
	}
	newUser = true
	for _, u := range f.Users {
		if u.Name == name {
			newUser = false
		}
	}
	out = append([]byte{}, src...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	if newUser {
		out = append(out, userText(name)...)
	}
	out = append(out, entry...)
	if _, err := Parse(out); err != nil {
		return nil, false, fmt.Errorf("the file would not load after the change: %w", err)
	}
	return out, newUser, nil
}

// The line tests below are plain string code, not regexps: package-level
// regexps compile in every quiot process at start (a publisher too), and
// these three alone brought about 40 KB of regexp code into the Pi binary.

// isTableHeader reports whether line opens a TOML table or array of tables.
func isTableHeader(line string) bool {
	return strings.HasPrefix(strings.TrimLeft(line, tomlSpace), "[")
}

// isUserHeader reports whether line is a [[user]] header, optionally with
// a comment after it.
func isUserHeader(line string) bool {
	s, ok := strings.CutPrefix(strings.TrimLeft(line, tomlSpace), "[[")
	if !ok {
		return false
	}
	if s, ok = strings.CutPrefix(strings.TrimLeft(s, tomlSpace), "user"); !ok {
		return false
	}
	if s, ok = strings.CutPrefix(strings.TrimLeft(s, tomlSpace), "]]"); !ok {
		return false
	}
	s = strings.TrimLeft(s, tomlSpace)
	return s == "" || s[0] == '#' && !strings.Contains(s, "\n")
}

// isPlainKey reports whether line sets a plain-text token or password key.
func isPlainKey(line string) bool {
	s := strings.TrimLeft(line, tomlSpace)
	for _, key := range []string{"token", "password"} {
		if rest, ok := strings.CutPrefix(s, key); ok && strings.HasPrefix(strings.TrimLeft(rest, tomlSpace), "=") {
			return true
		}
	}
	return false
}

// tomlSpace is what the former regexps' \s matched.
const tomlSpace = " \t\n\f\r"

// Convert replaces the plain-text credentials of an old ACL file (token =
// and password = inside [[user]]) by [[token]] (SHA-256) and [[password]]
// (bcrypt at cost; 0 = DefaultCost) entries for the same secrets, so that
// devices keep working. It returns how many it converted, and checks that
// every converted secret still authenticates as its user under the result.
func Convert(src []byte, cost int) (out []byte, n int, err error) {
	f, err := Decode(src)
	if err != nil {
		return nil, 0, err
	}
	if _, err := New(f); err != nil {
		return nil, 0, err
	}
	var keep bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	inUser := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case isUserHeader(line):
			inUser = true
		case isTableHeader(line):
			inUser = false
		case inUser && isPlainKey(line):
			continue
		}
		keep.WriteString(line)
		keep.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	now := time.Now().UTC().Format("2006-01-02")
	for _, u := range f.Users {
		if u.Token != "" {
			k := tokenKey(u.Token)
			t := Token{User: u.Name, SHA256: fmt.Sprintf("%x", k[:]), Note: "converted from plain text on " + now}
			keep.WriteString(t.TOML())
			n++
		}
		if u.Password != "" {
			p, err := NewPassword(u.Name, u.Password, cost, time.Time{}, "converted from plain text on "+now)
			if err != nil {
				return nil, 0, fmt.Errorf("user %q: %w", u.Name, err)
			}
			keep.WriteString(p.TOML())
			n++
		}
	}
	out = keep.Bytes()
	a, err := Parse(out)
	if err != nil {
		return nil, 0, fmt.Errorf("couldn't convert automatically (%w): move each token/password line into [[token]]/[[password]] entries by hand (docs/security.md)", err)
	}
	if w := a.Warnings(); len(w) > 0 {
		return nil, 0, fmt.Errorf("couldn't convert automatically (plain-text credentials left: %s): convert them by hand (docs/security.md)", w[0])
	}
	for _, u := range f.Users {
		if u.Token != "" {
			if id, ok := a.Token(u.Token); !ok || id != u.Name {
				return nil, 0, fmt.Errorf("couldn't convert automatically: the token of %q would not authenticate; convert by hand (docs/security.md)", u.Name)
			}
		}
		if u.Password != "" {
			if id, ok := a.Basic(u.Name, u.Password); !ok || id != u.Name {
				return nil, 0, fmt.Errorf("couldn't convert automatically: the password of %q would not authenticate; convert by hand (docs/security.md)", u.Name)
			}
		}
	}
	return out, n, nil
}
