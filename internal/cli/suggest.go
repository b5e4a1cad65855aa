package cli

import (
	"flag"
	"sort"
)

// closestFlag returns the flag of fs nearest to name by edit distance, if
// it is close: at most 3 edits and at most half of name's length, so a
// short or unrelated name gets no suggestion. Ties go to the first name in
// alphabetical order.
func closestFlag(fs *flag.FlagSet, name string) (string, bool) {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	best, bestD := "", -1
	for _, n := range names {
		d := editDistance(name, n)
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > 3 || 2*bestD > len(name) {
		return "", false
	}
	return best, true
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
