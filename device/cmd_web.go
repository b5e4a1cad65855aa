package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/web"
)

// `quiot broker` flags of the browser part (broker/web): CORS origins, the
// dashboard and session tokens.
func init() {
	var corsOrigins string
	var dashboard bool
	var sessionTTL time.Duration
	registerBrokerExtension(brokerExtension{
		name: "web",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&corsOrigins, "cors-origins", "", "comma-separated origins (https://app.example:8443) whose web pages may publish and subscribe from a browser; '*' = any; empty = none")
			fs.BoolVar(&dashboard, "dashboard", true, "serve the live dashboard at https://BROKER/ (behind the same authentication)")
			fs.DurationVar(&sessionTTL, "session-ttl", 15*time.Minute, "lifetime of browser session tokens (POST /v1/session)")
		},
		configure: func(opts *broker.Options, _ io.Writer) error {
			origins, err := web.ParseOrigins(corsOrigins)
			if err != nil {
				return fmt.Errorf("%w: --cors-origins: %v", errUsage, err)
			}
			if sessionTTL <= 0 {
				return fmt.Errorf("%w: --session-ttl must be positive", errUsage)
			}
			opts.Web = &web.Options{CORSOrigins: origins, Dashboard: dashboard, SessionTTL: sessionTTL}
			return nil
		},
	})
}
