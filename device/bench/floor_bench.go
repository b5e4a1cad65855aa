package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/quiot/quiot/internal/quictune"
)

// Floors are a link profile's floors (floor.go) for a first connection
// and a resumed one, from the datagrams of a calibration (MeasureFloors).
type Floors struct {
	// Profile is the link profile's name.
	Profile string `json:"profile"`
	// ColdMs and WarmMs are the floors; Cold and Warm how they add up.
	ColdMs float64 `json:"floor_cold_ms"`
	WarmMs float64 `json:"floor_warm_ms"`
	Cold   *Floor  `json:"floor_cold,omitempty"`
	Warm   *Floor  `json:"floor_warm,omitempty"`
}

// MeasureFloors runs two HTTP/3 wake-ups of the reconnect workload over
// profile, in this process (a first connection, then a resumed one with
// 0-RTT), with tuning (lean when nil) and a payload of payload bytes, and
// returns the floors computed from their datagrams and the link model.
func MeasureFloors(ctx context.Context, link Link, profile string, tuning *quictune.Profile, payload int, log *slog.Logger) (Floors, error) {
	if tuning == nil {
		tuning = quictune.Lean()
	}
	tun := *tuning
	tun.SessionResumption, tun.Allow0RTT = true, true
	ws, err := Reconnect(ctx, ReconnectOptions{Link: link, Profile: profile, Proto: ProtoH3, Tuning: &tun, Wakeups: 2,
		Sleep: 100 * time.Millisecond, Payload: payload, Logger: log})
	if err != nil {
		return Floors{Profile: profile}, fmt.Errorf("floor of %s: %w", profile, err)
	}
	f := Floors{Profile: profile, Cold: ws[0].Floor, Warm: ws[1].Floor}
	if f.Cold != nil {
		f.ColdMs = f.Cold.Ms
	}
	if f.Warm != nil {
		f.WarmMs = f.Warm.Ms
	}
	return f, nil
}

// WriteFloors prints each profile's floors and the bench's median TTFD per
// configuration (headline payload) as a multiple of the first-connection
// floor: every run's publisher makes a first connection.
func WriteFloors(w io.Writer, floors []Floors, s *Summary, samples []Sample) error {
	ix := newIndex(samples)
	for _, f := range floors {
		if _, err := fmt.Fprintf(w, "floor on %s: first connection %s; resumed %s\n", f.Profile, floorText(f.Cold), floorText(f.Warm)); err != nil {
			return err
		}
		var cs []Config
		for _, p := range comparisonPairs(s) {
			if p.profile == f.Profile {
				cs = append(cs, append(append([]Config(nil), p.h3...), p.mqtt)...)
			}
		}
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Tuning < cs[j].Tuning })
		for _, c := range cs {
			ttfd := Median(ix.values(c, "ttfd_ms"))
			if _, err := fmt.Fprintf(w, "  %s, %s: TTFD %.0f ms = %s the first-connection floor\n", c.Tuning, c.Label(), ttfd, times(ttfd, f.ColdMs)); err != nil {
				return err
			}
		}
	}
	return nil
}
