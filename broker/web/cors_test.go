package web

import (
	"errors"
	"testing"
)

func TestParseOrigins(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "https://App.example:8443, http://127.0.0.1:8080", want: []string{"https://app.example:8443", "http://127.0.0.1:8080"}},
		{in: "*", want: []string{"*"}},
		{in: "https://a.example/", want: []string{"https://a.example"}},
		{in: "a.example", wantErr: true},
		{in: "ftp://a.example", wantErr: true},
		{in: "https://a.example/path", wantErr: true},
		{in: "https://user@a.example", wantErr: true},
		{in: "https://a.example?x=1", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseOrigins(tc.in)
			if tc.wantErr {
				if !errors.Is(err, errBadOrigin) {
					t.Fatalf("err %v, want errBadOrigin", err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func TestCORSAllows(t *testing.T) {
	p, err := newCORSPolicy([]string{"https://app.example"})
	if err != nil {
		t.Fatal(err)
	}
	anyP, _ := newCORSPolicy([]string{"*"})
	none, _ := newCORSPolicy(nil)
	tests := []struct {
		name   string
		p      corsPolicy
		origin string
		want   bool
	}{
		{"listed", p, "https://app.example", true},
		{"case", p, "HTTPS://APP.example", true},
		{"other port", p, "https://app.example:444", false},
		{"http", p, "http://app.example", false},
		{"null", p, "null", false},
		{"any", anyP, "https://x.example", true},
		{"any null", anyP, "null", false},
		{"none", none, "https://app.example", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.allows(tc.origin); got != tc.want {
				t.Fatalf("allows(%q) = %v", tc.origin, got)
			}
		})
	}
}
