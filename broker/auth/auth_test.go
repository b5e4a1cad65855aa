package auth

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = `
[anonymous]
publish = ["public/#"]
subscribe = ["public/#"]

[[user]]
name = "sensor-1"
token = "tok1"
password = "pw1"
publish = ["sensors/%u/#"]
subscribe = ["cmd/%u/#", "$SYS/#"]

[[user]]
name = "admin"
token = "tok2"
publish = ["#"]
subscribe = ["#"]
`

func TestParseAndAllow(t *testing.T) {
	a, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := a.Token("tok1"); !ok || id != "sensor-1" {
		t.Fatalf("Token(tok1) = %q, %v", id, ok)
	}
	if _, ok := a.Token("nope"); ok {
		t.Fatal("unknown token accepted")
	}
	if id, ok := a.Basic("sensor-1", "pw1"); !ok || id != "sensor-1" {
		t.Fatalf("Basic = %q, %v", id, ok)
	}
	if _, ok := a.Basic("sensor-1", "pw2"); ok {
		t.Fatal("wrong password accepted")
	}
	if _, ok := a.Basic("admin", ""); ok {
		t.Fatal("user without password accepted by Basic")
	}
	if !a.Anonymous() {
		t.Fatal("anonymous configured but not reported")
	}
	tests := []struct {
		id     string
		action Action
		t      string
		want   bool
	}{
		{"sensor-1", Publish, "sensors/sensor-1/temp", true},
		{"sensor-1", Publish, "sensors/sensor-2/temp", false},
		{"sensor-1", Subscribe, "cmd/sensor-1/#", true},
		{"sensor-1", Subscribe, "cmd/+/#", false},
		{"sensor-1", Subscribe, "$SYS/uptime", true},
		{"sensor-1", Subscribe, "#", false},
		{"admin", Subscribe, "#", true},
		{"admin", Publish, "a/b", true},
		{"", Publish, "public/x", true},
		{"", Publish, "private/x", false},
		{"", Subscribe, "public/+", true},
		{"", Subscribe, "+/x", false},
		{"unknown-cn", Subscribe, "public/#", false}, // no [[user]] entry: no rights (issue 27 finding 7)
		{"unknown-cn", Publish, "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.id+" "+tt.action.String()+" "+tt.t, func(t *testing.T) {
			if got := a.Allow(tt.id, tt.action, tt.t); got != tt.want {
				t.Fatalf("Allow = %v, want %v", got, tt.want)
			}
			if err := a.Check(tt.id, tt.action, tt.t); (err == nil) != tt.want {
				t.Fatalf("Check = %v", err)
			}
		})
	}
}

func TestNoAnonymous(t *testing.T) {
	a, err := Parse([]byte("[[user]]\nname = \"u\"\ntoken = \"t\"\npublish = [\"#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Anonymous() {
		t.Fatal("anonymous reported without [anonymous]")
	}
	if a.Allow("", Publish, "x") || a.Allow("stranger", Publish, "x") {
		t.Fatal("anonymous or unknown identity allowed")
	}
}

func TestOpen(t *testing.T) {
	var nilA *Authenticator
	for _, a := range []*Authenticator{nilA, Open()} {
		if !a.Anonymous() || !a.Allow("", Subscribe, "#") || !a.IsOpen() {
			t.Fatal("open authenticator refused")
		}
	}
}

// TestDollarTopicsNeverPublished: no client publishes to a `$` topic (or
// to a name holding a wildcard), in every mode and whatever the ACL says
// (docs/security.md); subscribing to `$SYS/#` is the ACL's decision.
func TestDollarTopicsNeverPublished(t *testing.T) {
	acl, err := Parse([]byte(sample + "\n[[user]]\nname = \"sys\"\ntoken = \"tok3\"\npublish = [\"$SYS/#\", \"#\"]\nsubscribe = [\"$SYS/#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var nilA *Authenticator
	modes := []struct {
		name string
		a    *Authenticator
		id   string
	}{
		{"nil", nilA, ""},
		{"loopback", LoopbackOnly(), ""},
		{"open", Open(), ""},
		{"acl admin", acl, "admin"},
		{"acl allowed $SYS/#", acl, "sys"},
	}
	for _, m := range modes {
		for _, topic := range []string{"$SYS/x", "$SYS/broker/uptime", "$", "$share/g/x", "a/+", "a/#"} {
			t.Run(m.name+" "+topic, func(t *testing.T) {
				if m.a.Allow(m.id, Publish, topic) {
					t.Fatal("publish allowed")
				}
				err := m.a.Check(m.id, Publish, topic)
				if !errors.Is(err, ErrDenied) {
					t.Fatalf("Check = %v", err)
				}
			})
		}
		if !m.a.Allow(m.id, Publish, "a/b") {
			t.Fatalf("%s: ordinary publish refused", m.name)
		}
		if m.id != "admin" && !m.a.Allow(m.id, Subscribe, "$SYS/#") {
			t.Fatalf("%s: $SYS subscription refused", m.name)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"syntax", "[[user]\n"},
		{"unknown key", "[[user]]\nname=\"a\"\ncolour=\"red\"\n"},
		{"no name", "[[user]]\ntoken=\"x\"\n"},
		{"dup name", "[[user]]\nname=\"a\"\n[[user]]\nname=\"a\"\n"},
		{"dup token", "[[user]]\nname=\"a\"\ntoken=\"t\"\n[[user]]\nname=\"b\"\ntoken=\"t\"\n"},
		{"bad pattern", "[[user]]\nname=\"a\"\npublish=[\"a/#/b\"]\n"},
		{"bad anon pattern", "[anonymous]\nsubscribe=[\"a/#/b\"]\n"},
		{"bad name", "[[user]]\nname=\"a:b\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse([]byte(tt.in)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p + ".missing"); err == nil {
		t.Fatal("missing file accepted")
	}
}

// TestBadIdentityNeverReachesPattern is the regression test of issue 9
// finding 4: a certificate CN "#" with the rule devices/%u/# could publish
// to devices/other/x and subscribe to devices/#, since %u was substituted
// unescaped.
func TestBadIdentityNeverReachesPattern(t *testing.T) {
	a, err := Parse([]byte(`
[anonymous]
publish = ["public/%u/#"]
subscribe = ["devices/%u/#"]

[[user]]
name = "dev-1"
subscribe = ["devices/%u/#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"#", "+", "a/b", "x\x00", "$SYS", "+/+"} {
		t.Run(id, func(t *testing.T) {
			if _, ok := a.Certificate(id); ok {
				t.Errorf("certificate CN %q accepted as identity", id)
			}
			for _, c := range []struct {
				action Action
				topic  string
			}{
				{Publish, "public/other/x"},
				{Publish, "public/#/x"},
				{Subscribe, "devices/#"},
				{Subscribe, "devices/other/x"},
				{Subscribe, "devices/+/x"},
			} {
				if a.Allow(id, c.action, c.topic) {
					t.Errorf("identity %q may %s %q", id, c.action, c.topic)
				}
			}
		})
	}
	if id, ok := a.Certificate("dev-1"); !ok || id != "dev-1" || !a.Allow(id, Subscribe, "devices/dev-1/#") {
		t.Fatal("a good identity lost its rights")
	}
	if _, err := Parse([]byte("[[user]]\nname = \"#\"\n")); err == nil {
		t.Fatal("user named # accepted")
	}
}

// TestCertificateNeedsUser is the decision half of issue 27 finding 7: a
// certificate CN without a [[user]] entry is refused even when
// [anonymous] exists (it used to get the anonymous rules under its own
// name, %u included), an identity without an entry is allowed nothing,
// and a reload that removes the entry ends the identity.
func TestCertificateNeedsUser(t *testing.T) {
	anon := "[anonymous]\npublish = [\"public/#\", \"devices/%u/#\"]\n"
	user := "[[user]]\nname = \"dev-1\"\npublish = [\"devices/%u/#\"]\n"
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(anon+user), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.CertificateIdentity("dev-1"); err != nil || id != "dev-1" || !a.Allow(id, Publish, "devices/dev-1/x") {
		t.Fatalf("dev-1 with an entry: %q %v", id, err)
	}
	if _, err := a.CertificateIdentity("dev-2"); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "no [[user]] entry") {
		t.Errorf("CN without an entry: %v, want ErrDenied naming the missing entry", err)
	}
	for _, topic := range []string{"public/x", "devices/dev-2/x"} {
		if a.Allow("dev-2", Publish, topic) {
			t.Errorf("identity without an entry may publish %q", topic)
		}
	}
	if !a.Allow("", Publish, "public/x") || a.Allow("", Publish, "devices//x") {
		t.Error("anonymous rules changed")
	}
	gen := a.Generation()
	if err := os.WriteFile(p, []byte(anon), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.StillValid("dev-1", gen) {
		t.Error("connection of the removed certificate identity stays valid")
	}
	if _, ok := a.Certificate("dev-1"); ok {
		t.Error("removed certificate still authenticates")
	}
	if a.Allow("dev-1", Publish, "devices/dev-1/x") || a.Allow("dev-1", Publish, "public/x") {
		t.Error("removed identity keeps rights")
	}
	if id, ok := Open().Certificate("dev-2"); !ok || id != "dev-2" {
		t.Error("without an ACL a certificate is its CN")
	}
}

// TestClientIDOwner is the decision half of issue 27 finding 8: with an
// ACL a client id equal to a [[user]] name belongs to that identity; other
// ids, and every id without an ACL, belong to nobody.
func TestClientIDOwner(t *testing.T) {
	acl, err := Parse([]byte("[anonymous]\n[[user]]\nname = \"sensor-1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a     *Authenticator
		cid   string
		owner string
		owned bool
	}{
		{acl, "sensor-1", "sensor-1", true},
		{acl, "sensor-2", "", false},
		{acl, "", "", false},
		{acl, "Sensor-1", "", false},
		{Open(), "sensor-1", "", false},
		{LoopbackOnly(), "sensor-1", "", false},
		{nil, "sensor-1", "", false},
	} {
		if owner, owned := c.a.ClientIDOwner(c.cid); owner != c.owner || owned != c.owned {
			t.Errorf("ClientIDOwner(%q) = %q, %v; want %q, %v", c.cid, owner, owned, c.owner, c.owned)
		}
	}
}

// TestAdmitLoopbackOnly is the decision half of issue 9 finding 5: a broker
// without an ACL serves loopback clients only.
func TestAdmitLoopbackOnly(t *testing.T) {
	acl, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	var nilA *Authenticator
	tests := []struct {
		remote                  string
		loopback, open, withACL bool
	}{
		{"127.0.0.1:4433", true, true, true},
		{"127.0.0.2:1", true, true, true},
		{"[::1]:9", true, true, true},
		{"[::ffff:127.0.0.1]:9", true, true, true},
		{"127.0.0.1", true, true, true},
		{"192.0.2.7:4433", false, true, true},
		{"10.0.0.1:1883", false, true, true},
		{"[2001:db8::1]:4433", false, true, true},
		{"[::ffff:192.0.2.7]:1", false, true, true},
		{"0.0.0.0:1", false, true, true},
		{"not an address", false, true, true},
		{"", false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.remote, func(t *testing.T) {
			for _, c := range []struct {
				name string
				a    *Authenticator
				want bool
			}{{"nil", nilA, tt.loopback}, {"LoopbackOnly", LoopbackOnly(), tt.loopback}, {"Open", Open(), tt.open}, {"ACL", acl, tt.withACL}} {
				err := c.a.Admit(tt.remote)
				if (err == nil) != c.want {
					t.Errorf("%s.Admit(%q) = %v, want allowed %v", c.name, tt.remote, err, c.want)
				}
				if err != nil && (!errors.Is(err, ErrDenied) || !errors.Is(err, ErrLoopbackOnly) || strings.Contains(err.Error(), "\n")) {
					t.Errorf("%s.Admit(%q) = %q: want one line wrapping ErrDenied and ErrLoopbackOnly", c.name, tt.remote, err)
				}
			}
		})
	}
	if !LoopbackOnly().LoopbackOnlyMode() || !nilA.LoopbackOnlyMode() || Open().LoopbackOnlyMode() || acl.LoopbackOnlyMode() {
		t.Fatal("LoopbackOnlyMode")
	}
}

// TestHashedCredentials is issue 9 finding 6: the file keeps only hashes,
// with an optional expiry per credential.
func TestHashedCredentials(t *testing.T) {
	src := []byte("[[user]]\nname = \"s1\"\npublish = [\"s/%u/#\"]\n")
	tok, te := NewToken("s1", time.Time{}, "test")
	out, newUser, err := Append(src, "s1", te.TOML())
	if err != nil || newUser {
		t.Fatalf("Append token: %v, new user %v", err, newUser)
	}
	pw := RandomPassword()
	pe, err := NewPassword("s1", pw, 4, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err = Append(out, "s1", pe.TOML()); err != nil {
		t.Fatal(err)
	}
	old, _ := NewToken("s2", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "expired")
	tok2, t2 := NewToken("s2", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "expires")
	out, newUser, err = Append(out, "s2", t2.TOML())
	if err != nil || !newUser {
		t.Fatalf("Append for a new user: %v, new user %v", err, newUser)
	}
	for _, secret := range []string{tok, pw, tok2} {
		if bytes.Contains(out, []byte(secret)) {
			t.Fatalf("secret %q written to the file:\n%s", secret, out)
		}
	}
	if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 {
		t.Errorf("token %q: want %s and 256 bits of base64url", tok, TokenPrefix)
	}
	a, err := Parse(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if w := a.Warnings(); len(w) != 0 {
		t.Errorf("warnings for a hashed file: %q", w)
	}
	a.now = func() time.Time { return time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC) }
	if id, ok := a.Token(tok); !ok || id != "s1" {
		t.Errorf("Token = %q %v", id, ok)
	}
	if id, ok := a.Token(tok2); !ok || id != "s2" {
		t.Errorf("unexpired token refused: %q %v", id, ok)
	}
	if _, ok := a.Token(old); ok {
		t.Error("a token that is not in the file accepted")
	}
	if id, ok := a.Basic("s1", pw); !ok || id != "s1" {
		t.Errorf("Basic = %q %v", id, ok)
	}
	if _, ok := a.Basic("s1", pw+"x"); ok {
		t.Error("wrong password accepted")
	}
	if _, ok := a.Basic("nobody", pw); ok {
		t.Error("unknown user accepted")
	}
	if s2 := a.Allow("s2", Publish, "s/s2/x"); s2 {
		t.Error("a user added by Append has rights")
	}
	// Expiry.
	a.now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	if _, ok := a.Token(tok2); ok {
		t.Error("expired token accepted")
	}
	if n := a.NextExpiry(); !n.IsZero() {
		t.Errorf("NextExpiry after the last expiry = %v", n)
	}
	a.now = nil
	// The verification cache: one bcrypt per password, not per call.
	before := a.verify.hashed.Load()
	for range 5 {
		if _, ok := a.Basic("s1", pw); !ok {
			t.Fatal("Basic refused")
		}
	}
	if n := a.verify.hashed.Load() - before; n > 1 {
		t.Errorf("%d bcrypt verifications for 5 logins with one password", n)
	}
}

func TestPlainTextAcceptedWithWarning(t *testing.T) {
	a, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	w := a.Warnings()
	if len(w) != 3 {
		t.Fatalf("warnings %q, want one per plain-text credential (3)", w)
	}
	for _, l := range w {
		if !strings.Contains(l, "quiot passwd --convert") || strings.Contains(l, "tok1") || strings.Contains(l, "pw1") {
			t.Errorf("warning %q: want the convert command and no secret", l)
		}
	}
}

func TestConvert(t *testing.T) {
	out, n, err := Convert([]byte(sample+"\n# trailing comment\n"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("converted %d, want 3", n)
	}
	for _, secret := range []string{"tok1", "tok2", "pw1"} {
		if bytes.Contains(out, []byte(`"`+secret+`"`)) {
			t.Errorf("%s still in the file:\n%s", secret, out)
		}
	}
	if !bytes.Contains(out, []byte("# trailing comment")) {
		t.Error("comments lost")
	}
	a, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings()) != 0 {
		t.Errorf("warnings after convert: %q", a.Warnings())
	}
	if id, ok := a.Token("tok2"); !ok || id != "admin" {
		t.Errorf("converted token: %q %v", id, ok)
	}
	if id, ok := a.Basic("sensor-1", "pw1"); !ok || id != "sensor-1" {
		t.Errorf("converted password: %q %v", id, ok)
	}
	if !a.Allow("sensor-1", Publish, "sensors/sensor-1/t") {
		t.Error("rules lost")
	}
	again, n, err := Convert(out, 4)
	if err != nil || n != 0 || !bytes.Equal(again, out) {
		t.Errorf("second convert: n=%d err=%v changed=%v", n, err, !bytes.Equal(again, out))
	}
}

func TestCredentialErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"token of unknown user", "[[token]]\nuser=\"x\"\nsha256=\"" + strings.Repeat("ab", 32) + "\"\n"},
		{"short sha256", "[[user]]\nname=\"x\"\n[[token]]\nuser=\"x\"\nsha256=\"abcd\"\n"},
		{"not a bcrypt hash", "[[user]]\nname=\"x\"\n[[password]]\nuser=\"x\"\nhash=\"pw\"\n"},
		{"password of unknown user", "[[password]]\nuser=\"x\"\nhash=\"$2a$04$abc\"\n"},
		{"same token twice", "[[user]]\nname=\"x\"\ntoken=\"t\"\n[[token]]\nuser=\"x\"\nsha256=\"e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8\"\n"},
		{"name with NUL", "[[user]]\nname=\"a\\u0000b\"\n"},
		{"name with $", "[[user]]\nname=\"$SYS\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse([]byte(tt.in)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := NewPassword("x", "", 0, time.Time{}, ""); err == nil {
		t.Error("empty password accepted")
	}
	if _, err := NewPassword("x", "pw", 99, time.Time{}, ""); err == nil {
		t.Error("cost 99 accepted")
	}
	if _, _, err := Append([]byte("[[user]]\nname=\"x\"\n"), "#", ""); err == nil {
		t.Error("Append for identity # accepted")
	}
}

// TestReload is the Authenticator half of issue 9 finding 6's reload: the
// rules change in place, Changed fires, and StillValid keeps the
// connections whose rights stayed and ends those whose rights went.
func TestReload(t *testing.T) {
	tokA, ta := NewToken("a", time.Time{}, "")
	tokB, tb := NewToken("b", time.Time{}, "")
	base := "[anonymous]\nsubscribe = [\"public/#\"]\n" +
		"[[user]]\nname = \"a\"\npublish = [\"a/#\"]\nsubscribe = [\"a/#\"]\n" +
		"[[user]]\nname = \"b\"\npublish = [\"b/#\"]\n" +
		"[[user]]\nname = \"c\"\npublish = [\"c/#\"]\n" +
		ta.TOML() + tb.TOML()
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	g0, ch := a.Watch()
	if g0 != a.Generation() || ch != a.Changed() {
		t.Fatal("Watch disagrees with Generation and Changed")
	}
	// a gains a pattern (stays), b loses its token (closed), c is removed
	// (closed), d is new (closed), e has no entry (no rights: closed),
	// anonymous unchanged (stays).
	next := "[anonymous]\nsubscribe = [\"public/#\"]\n" +
		"[[user]]\nname = \"a\"\npublish = [\"a/#\", \"x/#\"]\nsubscribe = [\"a/#\"]\n" +
		"[[user]]\nname = \"b\"\npublish = [\"b/#\"]\n" +
		"[[user]]\nname = \"d\"\npublish = [\"d/#\"]\n" +
		ta.TOML()
	if err := os.WriteFile(p, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by Reload")
	}
	if a.Generation() != g0+1 {
		t.Fatalf("generation %d, want %d", a.Generation(), g0+1)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{"a", true}, {"b", false}, {"c", false}, {"d", false}, {"", true}, {"e", false}, {"#", false}} {
		if got := a.StillValid(c.id, g0); got != c.want {
			t.Errorf("StillValid(%q) = %v, want %v", c.id, got, c.want)
		}
		if !a.StillValid(c.id, a.Generation()) && c.id != "#" && c.id != "e" {
			t.Errorf("StillValid(%q) at the current generation = false", c.id)
		}
	}
	if !a.Allow("a", Publish, "x/1") || a.Allow("c", Publish, "c/1") {
		t.Error("rules not swapped")
	}
	if _, ok := a.Token(tokB); ok {
		t.Error("removed token still accepted")
	}
	if id, ok := a.Token(tokA); !ok || id != "a" {
		t.Error("kept token refused")
	}
	// A bad file keeps the old rules; removing [anonymous] ends anonymous
	// connections and certificate identities without an entry.
	if err := os.WriteFile(p, []byte("[[user]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil || a.Generation() != g0+1 {
		t.Fatalf("bad file: err %v, generation %d", err, a.Generation())
	}
	g1 := a.Generation()
	if err := os.WriteFile(p, []byte(strings.Replace(next, "[anonymous]\nsubscribe = [\"public/#\"]\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{"a", true}, {"", false}, {"e", false}} {
		if got := a.StillValid(c.id, g1); got != c.want {
			t.Errorf("after removing [anonymous]: StillValid(%q) = %v, want %v", c.id, got, c.want)
		}
	}
	// A credential that expires counts as removed at the next Refresh.
	_, te := NewToken("a", time.Now().Add(time.Hour).Truncate(time.Second), "")
	f, _ := Decode([]byte(next + te.TOML()))
	if err := a.Replace(f); err != nil {
		t.Fatal(err)
	}
	g2 := a.Generation()
	if n := a.NextExpiry(); !n.Equal(te.Expires) {
		t.Errorf("NextExpiry = %v, want %v", n, te.Expires)
	}
	a.now = func() time.Time { return te.Expires }
	if err := a.Refresh(); err != nil {
		t.Fatal(err)
	}
	if a.StillValid("a", g2) || !a.StillValid("b", g2) {
		t.Error("Refresh after an expiry: a (expired token) must go, b must stay")
	}
	if err := LoopbackOnly().Reload(); !errors.Is(err, ErrNoFile) {
		t.Errorf("Reload without a file = %v", err)
	}
}
