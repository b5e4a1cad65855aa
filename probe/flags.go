package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseList parses a comma-separated list with conv.
func parseList[T any](name, s string, conv func(string) (T, error)) ([]T, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := conv(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: --%s: bad value %q", errUsage, name, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func atoi(s string) (int, error)       { return strconv.Atoi(s) }
func atof(s string) (float64, error)   { return strconv.ParseFloat(s, 64) }
func atoBytes(s string) (int64, error) { return parseBytes(s) }

// parseBytes reads a byte count with an optional K/M/G (binary) suffix;
// "0" and "unlimited" mean no limit.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	if s == "UNLIMITED" || s == "" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suf) {
			mult, s = u.m, strings.TrimSuffix(s, u.suf)
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad byte count %q", s)
	}
	return int64(v * float64(mult)), nil
}
