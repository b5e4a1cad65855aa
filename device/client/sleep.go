package client

import (
	"context"
	"time"

	"github.com/quiot/quiot/internal/backoff"
)

// Backoff computes reconnect delays (internal/backoff, shared with the
// broker's bridges).
type Backoff = backoff.Backoff

// sleep waits for d or until ctx is done, whichever comes first, and
// returns ctx.Err() in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
