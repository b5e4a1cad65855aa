package ovs

import "testing"

func TestFillerRulesDistinct(t *testing.T) {
	for _, n := range []int{0, 1, 3, 1000, 20000} {
		rules := FillerRules(n, 200)
		if len(rules) != n {
			t.Fatalf("n=%d: got %d rules", n, len(rules))
		}
		seen := map[string]bool{}
		for _, r := range rules {
			if seen[r] {
				t.Fatalf("n=%d: duplicate rule %q", n, r)
			}
			seen[r] = true
		}
	}
	if got := ForwardRules(1, 2); got[0] != "priority=100,in_port=1,actions=output:2" || got[1] != "priority=100,in_port=2,actions=output:1" {
		t.Fatalf("ForwardRules = %v", got)
	}
}
