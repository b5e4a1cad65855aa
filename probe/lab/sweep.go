package lab

import (
	"fmt"
	"time"
)

// Condition is one point of the sweep.
type Condition struct {
	// ID names the condition's files (samples/ID.csv,
	// distributions/ID.csv), e.g. "c007" or "floor".
	ID string
	// Path is "floor" (no switch) or "ovs".
	Path string
	// Size is the Ethernet frame size in bytes.
	Size int
	// Rate is the offered load in packets per second.
	Rate float64
	// Flows is the number of distinct 5-tuples.
	Flows int
	// Rules is the number of filler OpenFlow rules above the forwarding ones.
	Rules int
	// MemBytes limits ovs-vswitchd's memory; 0 = unlimited.
	MemBytes int64
	// CPUs limits ovs-vswitchd's CPU time in cores; 0 = unlimited.
	CPUs float64
	// Cold flushes the datapath flows before the condition and sends no
	// warmup, so each flow's first packet takes the upcall path.
	Cold bool
}

// Describe is a one-line description for progress output.
func (c Condition) Describe() string {
	mem := "unlimited"
	if c.MemBytes > 0 {
		mem = fmt.Sprintf("%dMiB", c.MemBytes>>20)
	}
	s := fmt.Sprintf("%s size=%d rate=%g flows=%d", c.Path, c.Size, c.Rate, c.Flows)
	if c.Path == "ovs" {
		s += fmt.Sprintf(" rules=%d mem=%s", c.Rules, mem)
		if c.CPUs > 0 {
			s += fmt.Sprintf(" cpus=%g", c.CPUs)
		}
		if c.Cold {
			s += " cold"
		} else {
			s += " warm"
		}
	}
	return s
}

// Sweep lists the factor levels. The first level of each list is the
// baseline. Conditions are: the full factorial of Sizes x Rates x Flows at
// the baseline of the rest; each further Rules level crossed with Rates (the
// classifier cost grows with load); each further memory and CPU level at the
// baseline size and flows crossed with Rates; and, when Cold, a cold
// condition for each Flows level.
type Sweep struct {
	Sizes []int
	Rates []float64
	Flows []int
	Rules []int
	Mems  []int64
	CPUs  []float64
	Cold  bool
	// Duration is the measured time of each condition; Warmup is sent
	// before it on warm conditions.
	Duration, Warmup time.Duration
	// FloorRate is the rate of the floor measurement; 0 = the baseline rate.
	FloorRate float64
	// Repeat measures every condition this many times (0 means 1), each
	// round in its own random order; the model and plots use each
	// condition's median repeat, so one stalled measurement does not
	// decide a condition.
	Repeat int
}

// QuickSweep is the `lab --quick` sweep: 26 conditions measured twice for
// 1.5 s each, under 3 minutes on a 2-core host.
func QuickSweep() Sweep {
	return Sweep{
		Sizes:    []int{128, 512, 1500},
		Rates:    []float64{500, 2000, 5000},
		Flows:    []int{1, 64},
		Rules:    []int{0, 2000},
		Mems:     []int64{0, 24 << 20},
		CPUs:     []float64{0},
		Cold:     true,
		Duration: 1500 * time.Millisecond,
		Warmup:   300 * time.Millisecond,
		Repeat:   2,
	}
}

// FullSweep is the default sweep of `lab` without --quick.
func FullSweep() Sweep {
	return Sweep{
		Sizes:    []int{64, 256, 512, 1024, 1500},
		Rates:    []float64{500, 1000, 2000, 5000, 10000, 20000},
		Flows:    []int{1, 16, 256, 2048},
		Rules:    []int{0, 1000, 10000},
		Mems:     []int64{0, 64 << 20, 32 << 20, 24 << 20, 20 << 20},
		CPUs:     []float64{0, 0.5},
		Cold:     true,
		Duration: 5 * time.Second,
		Warmup:   time.Second,
		Repeat:   3,
	}
}

// Validate reports an unusable sweep.
func (s Sweep) Validate() error {
	if len(s.Sizes) == 0 || len(s.Rates) == 0 || len(s.Flows) == 0 {
		return fmt.Errorf("sweep needs at least one size, rate and flow count")
	}
	for _, v := range s.Sizes {
		if v < 64 || v > 1514 {
			return fmt.Errorf("frame size %d out of range 64..1514", v)
		}
	}
	for _, v := range s.Rates {
		if v <= 0 || v > 1e6 {
			return fmt.Errorf("rate %g pps out of range (0, 1e6]", v)
		}
	}
	for _, v := range s.Flows {
		if v < 1 || v > 60000 {
			return fmt.Errorf("flows %d out of range 1..60000", v)
		}
	}
	for _, v := range s.Rules {
		if v < 0 || v > 1000000 {
			return fmt.Errorf("rules %d out of range 0..1000000", v)
		}
	}
	for _, v := range s.Mems {
		if v != 0 && v < 8<<20 {
			return fmt.Errorf("memory limit %d bytes below 8 MiB: ovs-vswitchd cannot run", v)
		}
	}
	for _, v := range s.CPUs {
		if v < 0 {
			return fmt.Errorf("negative CPU quota %g", v)
		}
	}
	if s.Duration <= 0 {
		return fmt.Errorf("duration must be positive")
	}
	if s.Warmup < 0 {
		return fmt.Errorf("warmup must not be negative")
	}
	if s.Repeat < 0 || s.Repeat > 100 {
		return fmt.Errorf("repeat %d out of range 0..100", s.Repeat)
	}
	return nil
}

func first[T any](xs []T) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	return xs[0]
}

// Conditions expands the sweep (OVS conditions only; the floor is apart),
// numbered c001, c002, ...
func (s Sweep) Conditions() []Condition {
	base := Condition{Path: "ovs", Size: first(s.Sizes), Rate: first(s.Rates), Flows: first(s.Flows),
		Rules: first(s.Rules), MemBytes: first(s.Mems), CPUs: first(s.CPUs)}
	var out []Condition
	for _, size := range s.Sizes {
		for _, flows := range s.Flows {
			for _, rate := range s.Rates {
				c := base
				c.Size, c.Rate, c.Flows = size, rate, flows
				out = append(out, c)
			}
		}
	}
	if len(s.Rules) > 1 {
		for _, r := range s.Rules[1:] {
			for _, rate := range s.Rates {
				c := base
				c.Rules, c.Rate = r, rate
				out = append(out, c)
			}
		}
	}
	if len(s.Mems) > 1 {
		for _, m := range s.Mems[1:] {
			for _, rate := range s.Rates {
				c := base
				c.MemBytes, c.Rate = m, rate
				out = append(out, c)
			}
		}
	}
	if len(s.CPUs) > 1 {
		for _, q := range s.CPUs[1:] {
			for _, rate := range s.Rates {
				c := base
				c.CPUs, c.Rate = q, rate
				out = append(out, c)
			}
		}
	}
	if s.Cold {
		for _, flows := range s.Flows {
			c := base
			c.Flows, c.Cold = flows, true
			out = append(out, c)
		}
	}
	for i := range out {
		out[i].ID = fmt.Sprintf("c%03d", i+1)
	}
	return out
}
