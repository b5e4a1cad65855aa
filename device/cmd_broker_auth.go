package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
)

// SIGHUP reloads the ACL file of `quiot broker --auth` (issue 9 finding
// 6): the rules change in place, connections whose rights the new file
// removed are closed (broker/auth StillValid; the HTTP/3 and MQTT sides
// watch the authenticator), the others stay. A credential's expiry is
// applied the same way, at the moment it expires. Without --auth, SIGHUP
// is logged and ignored (it does not end the broker).

func init() {
	var thr auth.Throttle
	registerBrokerExtension(brokerExtension{
		name: "acl-reload",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&thr.Failures, "auth-fail-limit", 0, "wrong passwords (HTTP Basic, MQTT CONNECT) one source address may send within --auth-fail-window before its password attempts are refused for --auth-fail-backoff (0 = 10; -1 = no throttling)")
			fs.DurationVar(&thr.Window, "auth-fail-window", 0, "time over which --auth-fail-limit counts wrong passwords (0 = 1m)")
			fs.DurationVar(&thr.Backoff, "auth-fail-backoff", 0, "how long an address that reached --auth-fail-limit is refused (HTTP 429, MQTT Connection rate exceeded) (0 = 1m)")
			fs.IntVar(&thr.MaxAddrs, "auth-fail-addrs", 0, "source addresses (IPv6 by /64) whose wrong passwords are remembered at most, about 100 bytes each (0 = 10000)")
		},
		configure: func(opts *broker.Options, _ io.Writer) error {
			if thr.Window < 0 || thr.Backoff < 0 || thr.MaxAddrs < 0 || thr.Failures < -1 {
				return fmt.Errorf("%w: --auth-fail-window, --auth-fail-backoff and --auth-fail-addrs must not be negative, --auth-fail-limit at least -1", errUsage)
			}
			opts.Auth.SetThrottle(thr)
			return nil
		},
		start: startACLReload,
	})
}

func startACLReload(ctx context.Context, _ *broker.Broker, opts *broker.Options, log *slog.Logger, _ io.Writer) (func(context.Context) error, error) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		aclReloader(ctx, opts.Auth, hup, done, log)
	}()
	return func(context.Context) error {
		signal.Stop(hup)
		close(done)
		<-stopped
		return nil
	}, nil
}

// aclReloader reloads a on each value from hup and refreshes it when a
// credential expires, until done is closed or ctx ends.
func aclReloader(ctx context.Context, a *auth.Authenticator, hup <-chan os.Signal, done <-chan struct{}, log *slog.Logger) {
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	arm := func() {
		expiry.Stop()
		if next := a.NextExpiry(); !next.IsZero() {
			expiry.Reset(time.Until(next))
		}
	}
	arm()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-hup:
			err := a.Reload()
			switch {
			case errors.Is(err, auth.ErrNoFile):
				log.Info("SIGHUP: no ACL file to reload (no --auth)")
				continue
			case err != nil:
				log.Error("ACL reload failed: the previous rules stay", "err", err)
				continue
			}
			log.Info("ACL reloaded", "generation", a.Generation())
			for _, w := range a.Warnings() {
				log.Warn("ACL: " + w)
			}
			arm()
		case <-expiry.C:
			if err := a.Refresh(); err != nil {
				log.Error("ACL refresh at a credential's expiry failed", "err", err)
			} else {
				log.Info("a credential expired: connections that may have used it are closed", "generation", a.Generation())
			}
			arm()
		}
	}
}
