package cli

import (
	"flag"
	"sort"
)

// ClosestFlag returns the name of the flag of fs nearest to name, if it is
// close enough to suggest ("did you mean --listen?"); see closestFlag.
func ClosestFlag(fs *flag.FlagSet, name string) (string, bool) { return closestFlag(fs, name) }

// closestFlag returns the flag of fs nearest to name by edit distance
// (editDistance), if
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

// editDistance is the edit distance between a and b (bytes): insertions,
// deletions, substitutions and swaps of two neighbours ("dve" for "dev")
// count one each (optimal string alignment).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
