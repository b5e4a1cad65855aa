package topic

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "a", true},
		{"levels", "sensors/kitchen/temp", true},
		{"dollar", "$SYS/uptime", true},
		{"spaces and unicode", "home/Küche/t e", true},
		{"empty", "", false},
		{"empty level middle", "a//b", true},
		{"leading slash", "/TopicA", true},
		{"trailing slash", "a/", true},
		{"slash only", "/", true},
		{"only empty levels", "///", true},
		{"dot level", "a/./b", true},
		{"dotdot level", "a/../b", true},
		{"dotdot alone", "..", true},
		{"dot alone", ".", true},
		{"percent", "a%2Fb", true},
		{"max levels empty", strings.Repeat("/", 15), true},
		{"too deep empty", strings.Repeat("/", 16), false},
		{"hash after empty", "a//#", false},
		{"plus", "a/+", false},
		{"hash", "a/#", false},
		{"hash alone", "#", false},
		{"plus inside", "a+b", false},
		{"nul", "a\x00b", false},
		{"bad utf8", "a\xffb", false},
		{"max levels", strings.Repeat("a/", 15) + "a", true},
		{"too deep", strings.Repeat("a/", 16) + "a", false},
		{"max length", strings.Repeat("x", 256), true},
		{"too long", strings.Repeat("x", 257), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateName(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestValidateFilter(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"literal", "a/b", true},
		{"hash alone", "#", true},
		{"plus alone", "+", true},
		{"plus plus", "+/+", true},
		{"plus hash", "+/#", true},
		{"trailing hash", "a/b/#", true},
		{"dollar", "$SYS/#", true},
		{"hash not last", "a/#/b", false},
		{"hash in level", "a/b#", false},
		{"plus in level", "a/b+/c", false},
		{"empty level", "a//#", true},
		{"leading slash", "/#", true},
		{"leading slash plus", "/+", true},
		{"trailing slash", "a/", true},
		{"trailing empty after plus", "+/", true},
		{"dotdot", "../+/#", true},
		{"hash then empty", "#/", false},
		{"plus in empty-level topic", "a//b+", false},
		{"empty", "", false},
		{"nul", "a/\x00", false},
		{"too deep", strings.Repeat("+/", 16) + "#", false},
		{"max depth", strings.Repeat("+/", 15) + "#", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateFilter(tt.in); (err == nil) != tt.ok {
				t.Fatalf("ValidateFilter(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	l := Limits{MaxLength: 5, MaxLevels: 2}
	if err := l.ValidateName("a/b/c"); err == nil {
		t.Fatal("3 levels accepted with MaxLevels 2")
	}
	if err := l.ValidateName("abcdef"); err == nil {
		t.Fatal("6 bytes accepted with MaxLength 5")
	}
	if err := l.ValidateFilter("a/#"); err != nil {
		t.Fatal(err)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		filter, name string
		want         bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
		{"#", "a", true},
		{"#", "a/b/c", true},
		{"+", "a", true},
		{"+", "a/b", false},
		{"+/+", "a/b", true},
		{"+/+", "a", false},
		{"+/+", "a/b/c", false},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"a/#", "a", true},
		{"a/#", "a/b", true},
		{"a/#", "a/b/c", true},
		{"a/#", "b/a", false},
		{"a/+/#", "a/b", true},
		{"a/+/#", "a", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"$SYS/+", "$SYS/x", true},
		{"a/+", "a/$x", true},
		{"ab", "a", false},
		{"a", "ab", false},
		{"/TopicA", "/TopicA", true},
		{"/TopicA", "TopicA", false},
		{"TopicA", "/TopicA", false},
		{"+/+", "/TopicA", true},
		{"/+", "/TopicA", true},
		{"+", "/TopicA", false},
		{"#", "/TopicA", true},
		{"/#", "/TopicA", true},
		{"a/+/b", "a//b", true},
		{"a//b", "a//b", true},
		{"a/b", "a//b", false},
		{"a/+", "a/", true},
		{"a/#", "a/", true},
		{"a/", "a", false},
		{"a", "a/", false},
		{"+/+", "/", true},
		{"a/../b", "a/../b", true},
		{"a/+/b", "a/../b", true},
		{"b", "a/../b", false},
	}
	for _, tt := range tests {
		t.Run(tt.filter+" "+tt.name, func(t *testing.T) {
			if got := Match(tt.filter, tt.name); got != tt.want {
				t.Fatalf("Match(%q, %q) = %v, want %v", tt.filter, tt.name, got, tt.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		super, sub string
		want       bool
	}{
		{"#", "a/b", true},
		{"#", "#", true},
		{"#", "$SYS/#", false},
		{"a/#", "a", true},
		{"a/#", "a/+/c", true},
		{"a/#", "a/#", true},
		{"a/+", "a/b", true},
		{"a/+", "a/+", true},
		{"a/+", "a/#", false},
		{"a/+", "a/b/c", false},
		{"a/b", "a/+", false},
		{"a/b", "a/b", true},
		{"a/b", "+/b", false},
		{"+/b", "a/b", true},
		{"$SYS/#", "$SYS/a", true},
		{"/#", "/a", true},
		{"+/#", "/a", true},
		{"a/+", "a/", true},
		{"a/", "a/+", false},
		{"a//+", "a//b", true},
		{"a/+/+", "a//b", true},
		{"a/b", "a//b", false},
	}
	for _, tt := range tests {
		t.Run(tt.super+" "+tt.sub, func(t *testing.T) {
			if got := Covers(tt.super, tt.sub); got != tt.want {
				t.Fatalf("Covers(%q, %q) = %v, want %v", tt.super, tt.sub, got, tt.want)
			}
		})
	}
}

// FuzzTopic checks that validation never panics, that valid names match
// themselves and "#", and that Match agrees with Covers for names.
func FuzzTopic(f *testing.F) {
	for _, s := range []string{"a/b", "#", "+/+", "$SYS/x", "a//b", "/TopicA", "a/", "a/../b", "a/#/b", "\x00", strings.Repeat("a/", 20)} {
		f.Add(s, "a/+")
	}
	f.Fuzz(func(t *testing.T, s, filter string) {
		nameErr := ValidateName(s)
		filterErr := ValidateFilter(filter)
		if nameErr == nil {
			if ValidateFilter(s) != nil {
				t.Fatalf("valid name %q is not a valid filter", s)
			}
			if !Match(s, s) {
				t.Fatalf("%q does not match itself", s)
			}
			if s[0] != '$' && !Match("#", s) {
				t.Fatalf("# does not match %q", s)
			}
			if filterErr == nil && Match(filter, s) != Covers(filter, s) {
				t.Fatalf("Match(%q,%q) != Covers", filter, s)
			}
		}
	})
}
