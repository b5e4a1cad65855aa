package inorder

import (
	"strconv"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
)

func TestCounter(t *testing.T) {
	sent := time.Unix(1700000000, 0)
	msg := func(topic string, n int, seq uint64) client.Message {
		return client.Message{Topic: topic, Seq: seq, Sent: sent.Add(time.Duration(n+int(seq)) * time.Millisecond), Payload: []byte(strconv.Itoa(n))}
	}
	tests := []struct {
		name     string
		opts     Options
		msgs     []client.Message
		wantErr  bool
		wantNext map[string]int
		wantDups int
	}{
		{"in order on two topics", Options{}, []client.Message{msg("a", 0, 1), msg("b", 0, 1), msg("a", 1, 2)}, false, map[string]int{"a": 2, "b": 1}, 0},
		{"redelivery recognised", Options{}, []client.Message{msg("a", 0, 1), msg("a", 1, 2), msg("a", 1, 2)}, false, map[string]int{"a": 2}, 1},
		{"gap", Options{}, []client.Message{msg("a", 0, 1), msg("a", 2, 3)}, true, nil, 0},
		{"reordered", Options{}, []client.Message{msg("a", 1, 1), msg("a", 0, 2)}, true, nil, 0},
		{"repeat with a new stamp", Options{}, []client.Message{msg("a", 0, 1), msg("a", 1, 2), msg("a", 0, 3)}, true, nil, 0},
		{"repeat by value allowed", Options{RepeatsByValue: true}, []client.Message{msg("a", 0, 1), msg("a", 1, 2), msg("a", 0, 3)}, false, map[string]int{"a": 2}, 1},
		{"jump ahead with repeats allowed", Options{RepeatsByValue: true}, []client.Message{msg("a", 0, 1), msg("a", 2, 2)}, true, nil, 0},
		{"gap announced", Options{}, []client.Message{{Topic: "a", Seq: 5, Gap: true}}, true, nil, 0},
		{"bad payload", Options{}, []client.Message{{Topic: "a", Seq: 1, Payload: []byte("x")}}, true, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.opts)
			for _, m := range tt.msgs {
				c.Handle(m)
			}
			if err := c.Err(); (err != nil) != tt.wantErr {
				t.Fatalf("Err() = %v, want error: %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			total := 0
			for tp, n := range tt.wantNext {
				c.WaitTopic(t, tp, n, time.Second)
				total += n
			}
			c.WaitTotal(t, total, time.Second)
			c.Check(t, tt.wantNext)
			if c.Total() != total || c.Dups() != tt.wantDups {
				t.Fatalf("total %d, dups %d; want %d, %d", c.Total(), c.Dups(), total, tt.wantDups)
			}
		})
	}
}

// TestWaitWakes: a wait returns when a message from another goroutine
// completes the count.
func TestWaitWakes(t *testing.T) {
	c := New(Options{})
	go func() {
		for i := range 3 {
			c.Handle(client.Message{Topic: "a", Seq: uint64(i + 1), Payload: []byte(strconv.Itoa(i))})
		}
	}()
	c.WaitTopic(t, "a", 3, 30*time.Second)
}
