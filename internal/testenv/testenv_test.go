package testenv

import "testing"

func TestRequireToolFindsSh(t *testing.T) {
	if p := RequireTool(t, "sh"); p == "" {
		t.Fatal("sh not found")
	}
}

func TestInCI(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"true", true}, {"1", true}, {"", false}, {"false", false}} {
		t.Setenv("CI", tc.v)
		if got := InCI(); got != tc.want {
			t.Errorf("CI=%q: InCI() = %v, want %v", tc.v, got, tc.want)
		}
	}
}
