package auth

import (
	"os"
	"path/filepath"
	"testing"
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
		{"unknown-cn", Subscribe, "public/#", true},
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
