//go:build !linux

package ovs

import (
	"context"
	"errors"
	"log/slog"
)

type hostLock struct{}

func acquireLock(ctx context.Context, path string, log *slog.Logger) (*hostLock, error) {
	return nil, errors.New("the ovs testbed needs Linux")
}

func (l *hostLock) release() {}
