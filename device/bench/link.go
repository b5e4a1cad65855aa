package bench

import (
	"context"
	"io"
)

// LinkInfo describes a link profile for the report.
type LinkInfo struct {
	// Name is the profile name.
	Name string `json:"name"`
	// DelayMs is the one-way delay per direction.
	DelayMs float64 `json:"delay_ms"`
	// JitterMs is the delay jitter.
	JitterMs float64 `json:"jitter_ms"`
	// LossPct is the random loss in percent per direction.
	LossPct float64 `json:"loss_pct"`
	// RateKbps is the rate limit in kbit/s per direction (uplink when they
	// differ); 0 means unlimited.
	RateKbps float64 `json:"rate_kbps"`
	// RateDownKbps is the downlink rate when it differs from RateKbps.
	RateDownKbps float64 `json:"rate_down_kbps,omitempty"`
	// OverheadBytes is what the link adds to each datagram's UDP payload
	// for its rate (the IPv4 and UDP headers: 28 in the link emulator).
	OverheadBytes int `json:"overhead_bytes,omitempty"`
	// Desc is a one-line description.
	Desc string `json:"desc,omitempty"`
}

// RTTMs is the round trip the link adds: twice the one-way delay.
func (l LinkInfo) RTTMs() float64 { return 2 * l.DelayMs }

// Link starts a link emulator between one client and the broker.
type Link interface {
	// Info describes the named profile; ok false for an unknown one.
	Info(profile string) (LinkInfo, bool)
	// Start relays UDP between clients that send to the returned address
	// and upstream (the broker's UDP address), impaired as the profile
	// says, until ctx ends or the closer is called. seed makes the
	// impairment repeatable.
	Start(ctx context.Context, profile, upstream string, seed int64) (addr string, c io.Closer, err error)
}
