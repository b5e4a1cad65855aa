//go:build !linux

package gen

import (
	"errors"
	"net/netip"
	"time"
)

var errUnsupported = errors.New("generator needs Linux")

func openFlows(ns string, dst netip.AddrPort, n, plen int) (sender, error) {
	return nil, errUnsupported
}
func openInjector(o Options, plen int) (sender, error) { return nil, errUnsupported }

func tuneThread(rt bool) error     { return nil }
func preciseSleep(d time.Duration) { time.Sleep(d) }

// Sink is a bound UDP socket at the probe destination (Linux only).
type Sink struct{}

// NewSink fails: the sink needs Linux.
func NewSink(ns string, addr netip.AddrPort) (*Sink, error) { return nil, errUnsupported }

// Addr returns the zero address.
func (s *Sink) Addr() netip.AddrPort { return netip.AddrPort{} }

// Close does nothing.
func (s *Sink) Close() error { return nil }
