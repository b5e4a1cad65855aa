// Package gctune sets the Go garbage collector of a long-running service
// (quiot broker) for small devices: Go's own heap target (GOGC=100) by
// default, bounded by a soft memory limit sized from the machine's RAM.
//
// Why not more: the MQTT broker (mochi) allocates about 2 KiB per
// delivered message, so a larger target collects less often (400 % made 20
// collections instead of 155 in the MQTT/TCP benchmark) but lets the heap
// grow to five times the live heap: with 1000 MQTT/TCP subscribers at
// 10,000 deliveries/s the broker's RSS reached 165-233 MB at 400 % and
// 70-83 MB at 100 %, for up to 20 % more CPU (docs/BENCH.md, "quiot
// beside mosquitto"). On a Pi Zero's 512 MB the memory is the budget that
// binds; --gc-percent 400 buys the CPU back where memory is plentiful.
package gctune

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/quiot/quiot/internal/cli"
)

const (
	// DefaultPercent is the GC percent (GOGC) applied when none is given.
	DefaultPercent = 100
	// MinAutoLimit and MaxAutoLimit bound the automatic memory limit
	// (a quarter of the physical memory).
	MinAutoLimit = 64 << 20
	// MaxAutoLimit is the largest automatic memory limit.
	MaxAutoLimit = 1 << 30
)

// Options are the collector settings. The zero value means the defaults.
type Options struct {
	// Percent is the GC percent (as GOGC): a collection starts when the
	// heap has grown by this percentage over the live heap; zero means
	// DefaultPercent (100), a negative value turns the proportional
	// trigger off (collections then start only at MemoryLimit).
	Percent int
	// MemoryLimit is the soft limit on the Go runtime's memory in bytes
	// (debug.SetMemoryLimit); zero means a quarter of the physical memory
	// (/proc/meminfo MemTotal) between 64 MiB and 1 GiB (64 MiB if it
	// cannot be read); a negative value means no limit.
	MemoryLimit int64
	// Env reads environment variables; nil means os.Getenv. GOGC and
	// GOMEMLIMIT, when set, win over the zero-value defaults (the runtime
	// has already applied them), not over values given here.
	Env func(string) string
}

// Applied reports what Apply set.
type Applied struct {
	// Percent is the GC percent in effect (negative: off).
	Percent int
	// MemoryLimit is the memory limit in effect in bytes (math.MaxInt64:
	// none).
	MemoryLimit int64
}

// String describes the settings, e.g. "gc-percent=100 memory-limit=128MiB".
func (a Applied) String() string {
	p := strconv.Itoa(a.Percent)
	if a.Percent < 0 {
		p = "off"
	}
	l := "none"
	if a.MemoryLimit != math.MaxInt64 {
		l = FormatSize(a.MemoryLimit)
	}
	return "gc-percent=" + p + " memory-limit=" + l
}

// Resolve returns the settings Apply would set, without applying them.
// meminfo is the content of /proc/meminfo (nil: unknown).
func Resolve(o Options, meminfo []byte) Applied {
	env := o.Env
	if env == nil {
		env = os.Getenv
	}
	a := Applied{Percent: o.Percent, MemoryLimit: o.MemoryLimit}
	if a.Percent == 0 {
		a.Percent = DefaultPercent
		if env("GOGC") != "" {
			a.Percent = 0 // keep the runtime's
		}
	}
	if a.MemoryLimit == 0 {
		a.MemoryLimit = AutoLimit(meminfo)
		if env("GOMEMLIMIT") != "" {
			a.MemoryLimit = 0 // keep the runtime's
		}
	} else if a.MemoryLimit < 0 {
		a.MemoryLimit = math.MaxInt64
	}
	return a
}

// Apply sets the collector from o and returns the settings in effect.
func Apply(o Options) Applied {
	mi, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		mi = nil
	}
	a := Resolve(o, mi)
	if a.Percent != 0 {
		debug.SetGCPercent(a.Percent)
	} else {
		a.Percent = debug.SetGCPercent(-1)
		debug.SetGCPercent(a.Percent)
	}
	if a.MemoryLimit != 0 {
		debug.SetMemoryLimit(a.MemoryLimit)
	} else {
		a.MemoryLimit = debug.SetMemoryLimit(-1)
	}
	return a
}

// AutoLimit is a quarter of MemTotal in meminfo (the content of
// /proc/meminfo), between MinAutoLimit and MaxAutoLimit; MinAutoLimit if
// meminfo has no MemTotal.
func AutoLimit(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kib <= 0 {
				break
			}
			return min(max(kib*1024/4, MinAutoLimit), MaxAutoLimit)
		}
	}
	return MinAutoLimit
}

// ParseSize parses a byte size in internal/cli's grammar (a number with
// an optional unit B, K, KB, KiB, M, MB, MiB, G, GB, GiB, all powers of
// 1024, e.g. "128MiB"); "auto" and "" are 0 (automatic), "off" and "none"
// are -1 (no limit).
func ParseSize(s string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return 0, nil
	case "off", "none":
		return -1, nil
	}
	return cli.ParseSize(s)
}

// FormatSize writes n bytes as internal/cli does ("64MiB", "1000").
func FormatSize(n int64) string { return cli.FormatSize(n) }
