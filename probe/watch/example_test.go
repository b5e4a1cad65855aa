package watch_test

import (
	"context"
	"os"
	"time"

	"github.com/quiot/quiot/probe/watch"
)

// Time quiot's QUIC packets (UDP 4433) crossing a switch from port p1 to
// port p2 for a minute, printing percentiles every second.
func ExampleRun() {
	s, err := watch.Run(context.Background(), watch.Options{
		IngressIf: "p1", EgressIf: "p2", Filter: "udp:4433",
		Duration: time.Minute, Interval: time.Second, Out: os.Stdout,
	})
	_, _ = s, err
}
