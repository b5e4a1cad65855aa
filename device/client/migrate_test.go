package client

import (
	"errors"
	"testing"
)

// TestFollowed: an unanswered probe means the broker already follows the
// new address only when the connection, still open, received packets
// during the probe.
func TestFollowed(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after uint64
		closed        error
		want          bool
	}{
		{"packets during the probe", 10, 12, nil, true},
		{"silence", 10, 10, nil, false},
		{"connection closed", 10, 12, errors.New("closed"), false},
	} {
		if got := followed(tc.before, tc.after, tc.closed); got != tc.want {
			t.Errorf("%s: followed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
