package main

import (
	"flag"
	"fmt"

	"github.com/quiot/quiot/broker/auth"
)

// The password throttle of `quiot broker` (auth.Throttle). The ACL file
// itself is --auth (cmd_broker.go); SIGHUP reloads it (broker/node: the
// rules change in place, connections whose rights the new file removed
// are closed, a credential's expiry is applied the same way at the moment
// it expires). Without --auth, SIGHUP is logged and ignored.

type authFlags struct {
	thr auth.Throttle
}

func (f *authFlags) register(fs *flag.FlagSet) {
	thr := &f.thr
	fs.IntVar(&thr.Failures, "auth-fail-limit", 0, "wrong passwords (HTTP Basic, MQTT CONNECT) one source address may send within --auth-fail-window before its password attempts are refused for --auth-fail-backoff (0 = 10; -1 = no throttling)")
	fs.DurationVar(&thr.Window, "auth-fail-window", 0, "time over which --auth-fail-limit counts wrong passwords (0 = 1m)")
	fs.DurationVar(&thr.Backoff, "auth-fail-backoff", 0, "how long an address that reached --auth-fail-limit is refused (HTTP 429, MQTT Connection rate exceeded) (0 = 1m)")
	fs.IntVar(&thr.MaxAddrs, "auth-fail-addrs", 0, "source addresses (IPv6 by /64) whose wrong passwords are remembered at most, about 100 bytes each (0 = 10000)")
}

// apply sets the throttle on a.
func (f *authFlags) apply(a *auth.Authenticator) error {
	thr := f.thr
	if thr.Window < 0 || thr.Backoff < 0 || thr.MaxAddrs < 0 || thr.Failures < -1 {
		return fmt.Errorf("%w: --auth-fail-window, --auth-fail-backoff and --auth-fail-addrs must not be negative, --auth-fail-limit at least -1", errUsage)
	}
	a.SetThrottle(thr)
	return nil
}
