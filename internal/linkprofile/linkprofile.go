// Package linkprofile holds the named link profiles of the quiot bench
// (lan, wifi, ltem, nbiot, lossy, sat) in an embedded data file,
// profiles.toml, with the sources of their numbers. The same profiles
// drive the userspace link emulator (internal/netimpair, via Up and Down)
// and tc netem on real testbeds (NetemCommands, scripts/netem/).
package linkprofile

import (
	_ "embed"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/quiot/quiot/internal/netimpair"
)

// profilesTOML is the built-in profiles file.
//
//go:embed profiles.toml
var profilesTOML []byte

// Builtin returns the raw built-in profiles file.
func Builtin() []byte { return append([]byte(nil), profilesTOML...) }

// Profile is one named link: the impairment of each direction.
type Profile struct {
	// Name is the profile's name ("nbiot").
	Name string
	// Description is a one-line description.
	Description string
	// Up is device -> broker; Down is broker -> device.
	Up, Down netimpair.Direction
}

// RTT returns the profile's base round-trip time (the two one-way delays).
func (p Profile) RTT() time.Duration { return p.Up.Delay + p.Down.Delay }

// Validate checks both directions.
func (p Profile) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("profile without a name")
	}
	if err := p.Up.Validate(); err != nil {
		return fmt.Errorf("profile %s: up: %w", p.Name, err)
	}
	if err := p.Down.Validate(); err != nil {
		return fmt.Errorf("profile %s: down: %w", p.Name, err)
	}
	return nil
}

// Set is an ordered collection of profiles.
type Set struct {
	names    []string
	profiles map[string]Profile
}

// Names returns the profile names in file order.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Get returns the named profile.
func (s *Set) Get(name string) (Profile, error) {
	p, ok := s.profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown link profile %q (known: %s)", name, strings.Join(s.names, ", "))
	}
	return p, nil
}

// All returns every profile in file order.
func (s *Set) All() []Profile {
	out := make([]Profile, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, s.profiles[n])
	}
	return out
}

// Default returns the built-in profiles. The embedded file is checked by
// the package's tests, so an error here is a build defect and panics.
func Default() *Set {
	s, err := Parse(profilesTOML, "profiles.toml")
	if err != nil {
		panic(fmt.Sprintf("linkprofile: built-in profiles: %v", err))
	}
	return s
}

// Get returns a built-in profile by name.
func Get(name string) (Profile, error) { return Default().Get(name) }

// Names returns the built-in profile names in file order.
func Names() []string { return Default().Names() }

// LoadFile reads a profiles file in the format of profiles.toml.
func LoadFile(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read link profiles: %w", err)
	}
	return Parse(b, path)
}

// dirSpec is one direction as written in the file; nil fields are unset.
type dirSpec struct {
	Delay      *time.Duration            `toml:"delay"`
	Jitter     *time.Duration            `toml:"jitter"`
	Reorder    *bool                     `toml:"reorder"`
	LossPct    *float64                  `toml:"loss_pct"`
	Burst      *netimpair.GilbertElliott `toml:"burst"`
	RateKbit   *float64                  `toml:"rate_kbit"`
	QueueLimit *int                      `toml:"queue_limit"`
}

// profileSpec is one profile as written in the file.
type profileSpec struct {
	Description string `toml:"description"`
	dirSpec
	Up   dirSpec `toml:"up"`
	Down dirSpec `toml:"down"`
}

// apply returns d with the fields set in s.
func (s dirSpec) apply(d netimpair.Direction) netimpair.Direction {
	if s.Delay != nil {
		d.Delay = *s.Delay
	}
	if s.Jitter != nil {
		d.Jitter = *s.Jitter
	}
	if s.Reorder != nil {
		d.Reorder = *s.Reorder
	}
	if s.LossPct != nil {
		d.LossPct = *s.LossPct
	}
	if s.Burst != nil {
		d.Burst = *s.Burst
	}
	if s.RateKbit != nil {
		d.RateKbit = *s.RateKbit
	}
	if s.QueueLimit != nil {
		d.QueueLimit = *s.QueueLimit
	}
	return d
}

// Parse reads a profiles file; source names it in errors.
func Parse(data []byte, source string) (*Set, error) {
	var raw map[string]profileSpec
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		return nil, fmt.Errorf("parse link profiles %s: %w", source, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("parse link profiles %s: unknown keys: %s", source, strings.Join(keys, ", "))
	}
	s := &Set{profiles: map[string]Profile{}}
	for _, k := range md.Keys() {
		if len(k) != 1 {
			continue
		}
		name := k[0]
		spec := raw[name]
		base := spec.dirSpec.apply(netimpair.Direction{})
		p := Profile{
			Name:        name,
			Description: spec.Description,
			Up:          spec.Up.apply(base),
			Down:        spec.Down.apply(base),
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("link profiles %s: %w", source, err)
		}
		s.names = append(s.names, name)
		s.profiles[name] = p
	}
	if len(s.names) == 0 {
		return nil, fmt.Errorf("link profiles %s: no profiles", source)
	}
	return s, nil
}
