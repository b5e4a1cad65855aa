package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"sync"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/device/hw"
	"github.com/quiot/quiot/internal/sdnotify"
)

// Running `quiot pub` and `quiot sub` as services: systemd readiness and
// watchdog, `pub --sensor` (payloads from the board's hardware) and
// `sub --gpio-out` (a GPIO output driven by each message).

// serviceNotifier sends READY=1 once per run and starts the watchdog.
type serviceNotifier struct {
	once sync.Once
	log  *slog.Logger
}

// ready tells systemd the role is up; later calls do nothing.
func (s *serviceNotifier) ready(ctx context.Context, status string) {
	s.once.Do(func() {
		if err := sdnotify.Start(ctx, status, nil); err != nil {
			s.log.Warn("systemd notification failed", "err", err)
		}
	})
}

// sensorFlagHelp is the help of pub's --sensor flag.
const sensorFlagHelp = "publish readings of the board's hardware instead of --payload: thermal (SoC temperature, JSON, one reading per message at --rate, or 1/s without --rate) or gpio:NAME (each edge of GPIO input NAME, pulled up, as JSON {\"pin\",\"level\"}); without --count it publishes until stopped"

// gpioOutFlagHelp is the help of sub's --gpio-out flag.
const gpioOutFlagHelp = "drive GPIO output NAME on each message (an LED, a relay): 1/on/high/true and 0/off/low/false (or JSON {\"level\":...}) set it, anything else toggles it"

// startPub prepares a publish run as a service: with --sensor it opens the
// sensor and makes the plan take each payload from it (unpaced sensors
// publish each reading at once; paced ones at --rate, 1/s if unset; --count
// defaults to 0); then it tells systemd the publisher is ready. The
// returned cleanup closes the sensor.
func startPub(ctx context.Context, fs *flag.FlagSet, sensor string, p *pubPlan, log *slog.Logger) (cleanup func(), err error) {
	cleanup = func() {}
	if sensor != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["payload"] || set["payload-size"] {
			return cleanup, fmt.Errorf("%w: --sensor replaces --payload and --payload-size", errUsage)
		}
		s, err := hw.OpenSensor(sensor)
		if err != nil {
			return cleanup, fmt.Errorf("%w: --sensor: %v", errUsage, err)
		}
		cleanup = func() {
			if err := s.Close(); err != nil {
				log.Debug("close sensor", "error", err)
			}
		}
		applySensor(s, p, set["rate"], set["count"])
	}
	n := &serviceNotifier{log: log}
	n.ready(ctx, "publishing to "+p.topic)
	return cleanup, nil
}

// applySensor makes p take its payloads from s. rateSet and countSet say
// whether --rate and --count were given.
func applySensor(s hw.Sensor, p *pubPlan, rateSet, countSet bool) {
	p.next = s.Next
	p.inflight = 1 // one reading at a time, in order
	if !s.Paced() {
		p.rate = 0
	} else if !rateSet {
		p.rate = 1
	}
	if !countSet {
		p.count = 0
	}
}

// openGPIOOut opens --gpio-out; nil without the flag.
func openGPIOOut(name string) (*hw.Output, error) {
	if name == "" {
		return nil, nil
	}
	o, err := hw.OpenOutput(name)
	if err != nil {
		return nil, fmt.Errorf("%w: --gpio-out: %v", errUsage, err)
	}
	return o, nil
}

// closeGPIOOut drives the output low at the end of the run.
func closeGPIOOut(o *hw.Output, log *slog.Logger) {
	if o == nil {
		return
	}
	if err := o.Close(); err != nil {
		log.Warn("gpio output", "err", err)
	}
}

// driveGPIOOut applies one delivered message to the output.
func driveGPIOOut(o *hw.Output, m *client.Message, log *slog.Logger) {
	if o == nil || m.Gap {
		return
	}
	l, err := o.Apply(m.Payload)
	if err != nil {
		log.Warn("gpio output", "err", err)
		return
	}
	log.Debug("gpio output", "level", l)
}
