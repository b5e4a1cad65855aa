// Package sdnotify tells systemd that a quiot role is ready and keeps its
// watchdog fed (Type=notify units with WatchdogSec=). It wraps
// github.com/coreos/go-systemd/v22/daemon; outside systemd (no
// $NOTIFY_SOCKET) every call is a no-op.
package sdnotify

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready sends READY=1 (and a STATUS= line when status is not empty). It
// reports whether systemd was notified; false with a nil error means the
// process does not run under a notify unit.
func Ready(status string) (bool, error) {
	state := daemon.SdNotifyReady
	if status != "" {
		state += "\nSTATUS=" + status
	}
	ok, err := daemon.SdNotify(false, state)
	if err != nil {
		return false, fmt.Errorf("sd_notify ready: %w", err)
	}
	return ok, nil
}

// Stopping sends STOPPING=1; call it when shutdown starts.
func Stopping() {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
}

// WatchdogInterval returns how often to ping the watchdog: half of
// WatchdogSec (as systemd recommends), or 0 when the watchdog is off for
// this process.
func WatchdogInterval() (time.Duration, error) {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("sd watchdog: %w", err)
	}
	return d / 2, nil
}

// Watchdog sends WATCHDOG=1 every interval until ctx is done. healthy, when
// not nil, is asked before each ping; a failing check skips the ping so that
// systemd restarts a wedged process. With interval <= 0 Watchdog returns at
// once.
func Watchdog(ctx context.Context, interval time.Duration, healthy func() error) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if healthy == nil || healthy() == nil {
			_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Start is what a role calls once it serves: it sends READY=1 with status
// and, when systemd enabled the watchdog, starts a goroutine that pings it
// until ctx is done. It never fails the role: outside systemd it does
// nothing, and errors are returned only for logging.
func Start(ctx context.Context, status string, healthy func() error) error {
	if _, err := Ready(status); err != nil {
		return err
	}
	iv, err := WatchdogInterval()
	if err != nil {
		return err
	}
	go Watchdog(ctx, iv, healthy)
	return nil
}
