package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/quiot/quiot/internal/linkprofile"
	"github.com/quiot/quiot/internal/netimpair"
)

// LinkProfile is one named link for ImpairLink: its description and the
// impairment of each direction.
type LinkProfile struct {
	// Info describes the link in the report.
	Info LinkInfo
	// Up is client -> broker, Down broker -> client.
	Up, Down netimpair.Direction
}

// ImpairLink is the Link of the userspace UDP link emulator
// (internal/netimpair): one relay per client, so each client has its own
// emulated access link.
type ImpairLink struct {
	// Profiles are the known link profiles by name.
	Profiles map[string]LinkProfile
}

// Info implements Link.
func (l *ImpairLink) Info(name string) (LinkInfo, bool) {
	p, ok := l.Profiles[name]
	return p.Info, ok
}

// Names lists the profile names, sorted.
func (l *ImpairLink) Names() []string {
	var out []string
	for n := range l.Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Start implements Link: a relay to upstream on 127.0.0.1:0, closed by
// the returned closer or when ctx ends.
func (l *ImpairLink) Start(ctx context.Context, name, upstream string, seed int64) (string, io.Closer, error) {
	p, ok := l.Profiles[name]
	if !ok {
		return "", nil, fmt.Errorf("unknown link profile %q", name)
	}
	r, err := netimpair.New(netimpair.Options{Upstream: upstream, Up: p.Up, Down: p.Down, Seed: uint64(seed)})
	if err != nil {
		return "", nil, fmt.Errorf("couldn't start link emulator: %w", err)
	}
	c := &relayCloser{r: r}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	c.stop = stop
	return r.Addr().String(), c, nil
}

// relayCloser closes a relay once.
type relayCloser struct {
	r    *netimpair.Relay
	once sync.Once
	stop func() bool
	err  error
}

// Close stops the relay; later calls return the first result.
func (c *relayCloser) Close() error {
	c.once.Do(func() {
		if c.stop != nil {
			c.stop()
		}
		c.err = c.r.Close()
	})
	return c.err
}

// NewImpairLink returns the link emulator with the built-in link profiles
// (internal/linkprofile).
func NewImpairLink() (*ImpairLink, error) {
	return impairLinkFrom(linkprofile.Default())
}

// LoadImpairLink returns the link emulator with the profiles of a file in
// the format of internal/linkprofile's profiles.toml.
func LoadImpairLink(path string) (*ImpairLink, error) {
	set, err := linkprofile.LoadFile(path)
	if err != nil {
		return nil, err
	}
	return impairLinkFrom(set)
}

func impairLinkFrom(set *linkprofile.Set) (*ImpairLink, error) {
	l := &ImpairLink{Profiles: map[string]LinkProfile{}}
	for _, p := range set.All() {
		info := LinkInfo{
			Name:         p.Name,
			DelayMs:      float64(p.Up.Delay) / float64(time.Millisecond),
			JitterMs:     float64(p.Up.Jitter) / float64(time.Millisecond),
			LossPct:      p.Up.LossPct + p.Up.Burst.MeanLossPct(),
			RateKbps:     p.Up.RateKbit,
			RateDownKbps: p.Down.RateKbit,
			// netimpair.Direction.Overhead: 0 means 28, -1 none.
			OverheadBytes: max(0, p.Up.Overhead),
			Desc:          p.Description,
		}
		if p.Up.Overhead == 0 {
			info.OverheadBytes = 28
		}
		// The report's RTT is the sum of both directions' delays.
		info.DelayMs = float64(p.RTT()) / 2 / float64(time.Millisecond)
		l.Profiles[p.Name] = LinkProfile{Info: info, Up: p.Up, Down: p.Down}
	}
	return l, nil
}
