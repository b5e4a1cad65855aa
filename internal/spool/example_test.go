package spool_test

import (
	"context"
	"fmt"
	"os"

	"github.com/quiot/quiot/internal/spool"
)

// A publisher appends; a deliverer takes messages in order and
// acknowledges each once the broker has it. What is not acknowledged
// comes again after the next Open.
func Example() {
	dir, _ := os.MkdirTemp("", "spool")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s, err := spool.Open(spool.Options{Dir: dir, Fsync: spool.FsyncAlways})
	if err != nil {
		panic(err)
	}
	for _, p := range []string{"21.5", "21.7", "22.0"} {
		if _, err := s.Append(ctx, spool.Message{Topic: "home/temp", Payload: []byte(p), QoS: 1}); err != nil {
			panic(err)
		}
	}
	m, _ := s.Next(ctx) // deliver the first one ...
	s.Ack(m.ID)         // ... the broker acknowledged it
	s.Close()           // e.g. the process ends

	s, _ = spool.Open(spool.Options{Dir: dir})
	defer s.Close()
	fmt.Println("pending after restart:", s.Pending())
	for s.Pending() > 0 {
		m, _ := s.Next(ctx)
		fmt.Println(m.ID, m.Topic, string(m.Payload))
		s.Ack(m.ID)
	}
	// Output:
	// pending after restart: 2
	// 2 home/temp 21.7
	// 3 home/temp 22.0
}
