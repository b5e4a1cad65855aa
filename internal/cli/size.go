package cli

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SizeForms names the forms a byte size may take, for error messages and
// help texts.
const SizeForms = "plain bytes (262144) or a number with a unit: 256k, 256KiB, 16M, 16MiB, 1G, 1GiB (K, M, G, KB, MB, GB, KiB, MiB, GiB are all powers of 1024; B is bytes)"

// ParseSize parses a byte size: a non-negative integer with an optional unit
// B, K, KB, KiB, M, MB, MiB, G, GB or GiB (case-insensitive, all powers of
// 1024, a space before the unit allowed), e.g. "1k", "128MiB", "262144". It
// is also the grammar of --memory-limit: internal/gctune.ParseSize reads
// that flag's words auto and off, then calls it.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: want %s", s, SizeForms)
	}
	var mult int64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q: want %s", s, t[i:], SizeForms)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: out of range", s)
	}
	return n * mult, nil
}

// FormatSize writes n bytes in the largest binary unit that divides it
// ("256KiB", "16MiB"), or as plain bytes ("1000").
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// sizeValue wraps an integer flag so that it accepts byte sizes.
type sizeValue struct {
	inner flag.Value
}

// Set parses s as a size and stores it in the wrapped flag.
func (v sizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	if err := v.inner.Set(strconv.FormatInt(n, 10)); err != nil {
		return fmt.Errorf("size %q: out of range", s)
	}
	return nil
}

// String returns the wrapped flag's value.
func (v sizeValue) String() string {
	if v.inner == nil {
		return ""
	}
	return v.inner.String()
}

// Get returns the wrapped flag's value, as flag.Getter does.
func (v sizeValue) Get() any {
	if g, ok := v.inner.(flag.Getter); ok {
		return g.Get()
	}
	return v.String()
}

// SizeFlags makes the named integer flags of fs (registered with IntVar,
// Int64Var, UintVar and the like) accept byte sizes as ParseSize reads
// them, on the command line and in a configuration file alike; the help
// shows their defaults as sizes. The flags keep their variables and types,
// so the command's code does not change. Names that are not flags of fs
// are skipped (a build may leave a flag out).
func SizeFlags(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if _, done := f.Value.(sizeValue); !done {
			f.Value = sizeValue{inner: f.Value}
		}
	}
}

// isSize reports whether f accepts byte sizes (see SizeFlags).
func isSize(f *flag.Flag) bool {
	_, ok := f.Value.(sizeValue)
	return ok
}
