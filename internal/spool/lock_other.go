//go:build !unix

package spool

import (
	"fmt"
	"os"
)

// lockDir opens the lock file; without flock(2) it does not lock.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("couldn't open spool lock: %w", err)
	}
	return f, nil
}
