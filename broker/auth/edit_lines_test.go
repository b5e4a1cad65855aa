package auth

import (
	"regexp"
	"testing"
)

// The regexps Convert used before its line tests became string code; the
// string code must classify every line the same way.
var (
	oldTableHeader = regexp.MustCompile(`^\s*\[`)
	oldUserHeader  = regexp.MustCompile(`^\s*\[\[\s*user\s*\]\]\s*(#.*)?$`)
	oldPlainKey    = regexp.MustCompile(`^\s*(token|password)\s*=`)
)

func TestConvertLineTests(t *testing.T) {
	tests := []struct {
		line               string
		table, user, plain bool
	}{
		{line: "[[user]]", table: true, user: true},
		{line: "  [[ user ]]  # the sensors", table: true, user: true},
		{line: "\t[[user]]#x", table: true, user: true},
		{line: "[[user]] x", table: true},
		{line: "[[users]]", table: true},
		{line: "[[token]]", table: true},
		{line: "[user]", table: true},
		{line: "[[user]", table: true},
		{line: "[ [user]]", table: true},
		{line: "  [server]", table: true},
		{line: "token = \"abc\"", plain: true},
		{line: "  password=\"x\"", plain: true},
		{line: "token\t= 'x'", plain: true},
		{line: "tokens = 1"},
		{line: "token_sha256 = \"ab\""},
		{line: "password_hash = \"$2a$\""},
		{line: "# token = \"x\""},
		{line: "name = \"token\""},
		{line: ""},
		{line: "   "},
		{line: "\v[[user]]"},
		{line: "\vtoken = 1"},
		{line: "\f[[user]]\r", table: true, user: true},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			if got := isTableHeader(tt.line); got != tt.table || got != oldTableHeader.MatchString(tt.line) {
				t.Errorf("isTableHeader(%q) = %v, want %v (old regexp %v)", tt.line, got, tt.table, oldTableHeader.MatchString(tt.line))
			}
			if got := isUserHeader(tt.line); got != tt.user || got != oldUserHeader.MatchString(tt.line) {
				t.Errorf("isUserHeader(%q) = %v, want %v (old regexp %v)", tt.line, got, tt.user, oldUserHeader.MatchString(tt.line))
			}
			if got := isPlainKey(tt.line); got != tt.plain || got != oldPlainKey.MatchString(tt.line) {
				t.Errorf("isPlainKey(%q) = %v, want %v (old regexp %v)", tt.line, got, tt.plain, oldPlainKey.MatchString(tt.line))
			}
		})
	}
}

// FuzzConvertLineTests checks the string line tests against the regexps
// they replaced on any line.
func FuzzConvertLineTests(f *testing.F) {
	for _, s := range []string{"[[user]]", " [[ user ]] # c", "token = 1", "password=2", "[x]", "tokens=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if isTableHeader(line) != oldTableHeader.MatchString(line) ||
			isUserHeader(line) != oldUserHeader.MatchString(line) ||
			isPlainKey(line) != oldPlainKey.MatchString(line) {
			t.Errorf("line %q: string tests (%v %v %v) disagree with the regexps (%v %v %v)", line,
				isTableHeader(line), isUserHeader(line), isPlainKey(line),
				oldTableHeader.MatchString(line), oldUserHeader.MatchString(line), oldPlainKey.MatchString(line))
		}
	})
}
