package cluster

import (
	"fmt"
	"reflect"
	"testing"
)

// TestGapNoteThen: a gap note not announced yet, followed by the drops
// since, is one note from the first to the last, with both topic lists (at
// most maxGapTopics of them, More set beyond).
func TestGapNoteThen(t *testing.T) {
	t.Parallel()
	many := make([]string, maxGapTopics)
	for i := range many {
		many[i] = fmt.Sprintf("t/%d", i)
	}
	for _, tc := range []struct {
		name    string
		g, next gapNote
		want    gapNote
	}{
		{"nothing since", gapNote{From: 3, To: 5, Count: 3, Topics: []string{"a"}}, gapNote{}, gapNote{From: 3, To: 5, Count: 3, Topics: []string{"a"}}},
		{"nothing before", gapNote{}, gapNote{From: 7, To: 7, Count: 1, Topics: []string{"b"}}, gapNote{From: 7, To: 7, Count: 1, Topics: []string{"b"}}},
		{"both", gapNote{From: 3, To: 5, Count: 3, Topics: []string{"a"}}, gapNote{From: 8, To: 9, Count: 2, Topics: []string{"a", "b"}}, gapNote{From: 3, To: 9, Count: 5, Topics: []string{"a", "b"}}},
		{"topics bounded", gapNote{From: 1, To: 1, Count: 1, Topics: many}, gapNote{From: 2, To: 2, Count: 1, Topics: []string{"x"}}, gapNote{From: 1, To: 2, Count: 2, Topics: many, More: true}},
		{"more kept", gapNote{From: 1, To: 1, Count: 1, More: true}, gapNote{From: 2, To: 2, Count: 1, Topics: []string{"x"}}, gapNote{From: 1, To: 2, Count: 2, Topics: []string{"x"}, More: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.g)
			if got := tc.g.then(tc.next); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("then = %+v, want %+v", got, tc.want)
			}
			if fmt.Sprint(tc.g) != before {
				t.Errorf("the earlier note changed: %v, was %s", tc.g, before)
			}
		})
	}
}
