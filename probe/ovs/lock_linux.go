//go:build linux

package ovs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// hostLock is an exclusive advisory lock (flock) on a file; the kernel drops
// it when the holder dies, so a killed run never blocks the next one.
type hostLock struct{ f *os.File }

// acquireLock takes the lock at path, waiting (and saying so once) while
// another process holds it, until ctx ends.
func acquireLock(ctx context.Context, path string, log *slog.Logger) (*hostLock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	said := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &hostLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !said {
			log.Warn("waiting for another ovsprobe testbed (or an OVS test) to finish", "lock", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for testbed lock: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *hostLock) release() {
	if l != nil && l.f != nil {
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
