package linkprofile

import (
	"testing"
	"time"

	"github.com/quiot/quiot/internal/netimpair"
)

// sat returns the built-in sat profile.
func sat(t *testing.T) Profile {
	t.Helper()
	p, err := Default().Get("sat")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSatBurstEndsInTime checks that a loss burst of the sat profile ends
// in link time, not only after enough packets: a sender whose datagrams
// are all lost backs off exponentially (QUIC's PTO), and a burst counted
// in packets only then cuts the link for minutes. Over many seeds, once a
// burst starts, a datagram sent 2 s later must be lost no more often than
// the link's stationary loss allows.
func TestSatBurstEndsInTime(t *testing.T) {
	p := sat(t)
	for _, dir := range []struct {
		name string
		d    netimpair.Direction
	}{{"up", p.Up}, {"down", p.Down}} {
		t.Run(dir.name, func(t *testing.T) {
			const seeds = 2000
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			bursts, stillLost := 0, 0
			for seed := uint64(1); seed <= seeds; seed++ {
				l := netimpair.NewLink(dir.d, seed)
				now := t0
				// Sparse traffic (one datagram every 100 ms) until a
				// burst starts.
				started := false
				for range 20000 {
					now = now.Add(100 * time.Millisecond)
					if _, c := l.Admit(now, 100); c == netimpair.DropBurst {
						started = true
						break
					}
				}
				if !started {
					continue
				}
				bursts++
				if _, c := l.Admit(now.Add(2*time.Second), 100); c == netimpair.DropBurst {
					stillLost++
				}
			}
			if bursts < seeds/2 {
				t.Fatalf("only %d of %d seeds saw a burst", bursts, seeds)
			}
			// Stationary burst loss is 0.25 %; a chain that moves per
			// packet only keeps 80 % of the bursts going.
			if limit := bursts / 50; stillLost > limit {
				t.Errorf("%d of %d bursts still dropped a datagram sent 2 s after they began (want <= %d): the burst outlasts the silence", stillLost, bursts, limit)
			}
		})
	}
}

// TestSatBenchRepeat9 replays the down link of the bench run that never
// subscribed (sat, default tuning, MQTT, 16 B, repeat 9, seed 1): the
// broker's datagrams at the times of its qlog. With the chain moving per
// packet only, every datagram from the 10th (the PINGRESP and SUBACK after
// the CONNACK) to the last, 11.7 s later, fell into one burst of 30.
func TestSatBenchRepeat9(t *testing.T) {
	// runSeed(1, "mqtt-mqtt-default-sat-16-r9", "sub") of device/bench,
	// plus one for the down direction (netimpair.Options.Seed).
	const seed = 7870882863329509291 + 1
	// Departure times (ms) of the broker's datagrams in the failed run.
	sent := []float64{1.2, 201.8, 201.8, 207.4, 213.9, 401.5, 401.5, 575.2, 593.0,
		1177.9, 1178.0, 1186.8, 2453.7, 2453.7, 2682.8, 2708.4, 4987.5, 4987.5, 4987.5,
		5692.2, 5711.0, 10053.8, 10053.8, 11709.3, 11750.1}
	l := netimpair.NewLink(sat(t).Down, seed)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	firstAfter := -1.0
	for i, ms := range sent {
		_, c := l.Admit(t0.Add(time.Duration(ms*float64(time.Millisecond))), 100)
		if i >= 9 && c == netimpair.Kept && firstAfter < 0 {
			firstAfter = ms
		}
	}
	if firstAfter < 0 {
		t.Fatalf("no datagram after the CONNACK got through in %.1f s", sent[len(sent)-1]/1000)
	}
	t.Logf("first datagram after the CONNACK through at %.1f ms", firstAfter)
}
