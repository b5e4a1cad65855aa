package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/quiot/quiot/broker/web"
)

// `quiot broker` flags of the browser part (broker/web): CORS origins, the
// dashboard and session tokens.
type webFlags struct {
	corsOrigins string
	dashboard   bool
	sessionTTL  time.Duration
}

func (f *webFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.corsOrigins, "cors-origins", "", "comma-separated origins (https://app.example:8443) whose web pages may publish and subscribe from a browser; '*' = any; empty = none")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the live dashboard at https://BROKER/ (behind the same authentication)")
	fs.DurationVar(&f.sessionTTL, "session-ttl", 15*time.Minute, "lifetime of browser session tokens (POST /v1/session)")
}

// options turns the flags into the browser part's options.
func (f *webFlags) options() (*web.Options, error) {
	origins, err := web.ParseOrigins(f.corsOrigins)
	if err != nil {
		return nil, fmt.Errorf("%w: --cors-origins: %v", errUsage, err)
	}
	if f.sessionTTL <= 0 {
		return nil, fmt.Errorf("%w: --session-ttl must be positive", errUsage)
	}
	return &web.Options{CORSOrigins: origins, Dashboard: f.dashboard, SessionTTL: f.sessionTTL}, nil
}
