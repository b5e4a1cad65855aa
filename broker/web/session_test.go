package web

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTokenSignVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := signer{key: []byte(strings.Repeat("k", 32))}
	other := signer{key: []byte(strings.Repeat("o", 32))}
	good := s.sign("alice", now.Add(time.Minute), 7)
	anon := s.sign("", now.Add(time.Minute), 7)
	tests := []struct {
		name    string
		tok     string
		s       signer
		at      time.Time
		wantID  string
		wantErr error
	}{
		{name: "valid", tok: good, s: s, at: now, wantID: "alice"},
		{name: "anonymous", tok: anon, s: s, at: now, wantID: ""},
		{name: "expired", tok: good, s: s, at: now.Add(time.Minute), wantErr: ErrTokenExpired},
		{name: "other key", tok: good, s: other, at: now, wantErr: ErrTokenSignature},
		{name: "identity swapped", tok: strings.Replace(good, "YWxpY2U", "Ym9i", 1), s: s, at: now, wantErr: ErrTokenSignature},
		{name: "expiry extended", tok: strings.Replace(good, "1800000060", "1900000060", 1), s: s, at: now, wantErr: ErrTokenSignature},
		{name: "generation changed", tok: strings.Replace(good, ".7.", ".8.", 1), s: s, at: now, wantErr: ErrTokenSignature},
		{name: "no prefix", tok: "abc", s: s, at: now, wantErr: ErrTokenMalformed},
		{name: "parts", tok: "qs1.a.b.c", s: s, at: now, wantErr: ErrTokenMalformed},
		{name: "bad expiry", tok: "qs1.YQ.x.1." + strings.Repeat("A", 43), s: s, at: now, wantErr: ErrTokenMalformed},
		{name: "bad generation", tok: "qs1.YQ.5.-1." + strings.Repeat("A", 43), s: s, at: now, wantErr: ErrTokenMalformed},
		{name: "short mac", tok: "qs1.YQ.5.1.AAAA", s: s, at: now, wantErr: ErrTokenMalformed},
		{name: "huge", tok: "qs1." + strings.Repeat("A", 2000), s: s, at: now, wantErr: ErrTokenMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := tc.s.verify(tc.tok, tc.at)
			if !errors.Is(err, tc.wantErr) || (err == nil && (tok.Identity != tc.wantID || tok.Generation != 7)) {
				t.Fatalf("verify = %+v, %v; want %q, %v", tok, err, tc.wantID, tc.wantErr)
			}
		})
	}
}

// FuzzParseToken: no input panics, and what parses signs back the same.
func FuzzParseToken(f *testing.F) {
	s := signer{key: []byte(strings.Repeat("k", 32))}
	f.Add(s.sign("alice", time.Unix(1_800_000_000, 0), 3))
	f.Add("qs1....")
	f.Add("qs1.YQ.1.0.")
	f.Fuzz(func(t *testing.T, in string) {
		tok, err := ParseToken(in)
		if err != nil {
			return
		}
		if tok.Expires.Unix() <= 0 {
			t.Fatalf("expiry %v accepted", tok.Expires)
		}
		if s.sign(tok.Identity, tok.Expires, tok.Generation) != in && s.verifyMAC(in) {
			t.Fatal("a token whose MAC verifies does not re-sign to itself")
		}
	})
}

// verifyMAC reports whether tok carries a valid MAC (tests only).
func (s signer) verifyMAC(tok string) bool {
	_, err := s.verify(tok, time.Unix(0, 0))
	return err == nil
}

func TestRedactString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/v1/topics/a?access_token=qs1.x.1.y", "/v1/topics/a?access_token=REDACTED"},
		{"/a?proto=1&access_token=qs1.x&count=2", "/a?proto=1&access_token=REDACTED&count=2"},
		{`uri="/a?access_token=t" x`, `uri="/a?access_token=REDACTED" x`},
		{"access_token=a access_token=b", "access_token=REDACTED access_token=REDACTED"},
		{"nothing here", "nothing here"},
	}
	for _, tc := range tests {
		if got := redactString(tc.in); got != tc.want {
			t.Errorf("redactString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
