package gctune

import (
	"math"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"", 0, ""},
		{"auto", 0, ""},
		{"off", -1, ""},
		{"none", -1, ""},
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"12B", 12, ""},
		{"64KiB", 64 << 10, ""},
		{"128MiB", 128 << 20, ""},
		{"128M", 128 << 20, ""},
		{"128 mb", 128 << 20, ""},
		{"2GiB", 2 << 30, ""},
		{"1.5GiB", 0, "unknown unit"},
		{"12XB", 0, "unknown unit"},
		{"MiB", 0, "want plain bytes"},
		{"-5MiB", 0, "want plain bytes"},
		{"99999999999999999999GiB", 0, "out of range"},
		{"9999999999GiB", 0, "out of range"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{{0, "0"}, {100, "100"}, {2048, "2KiB"}, {64 << 20, "64MiB"}, {3 << 30, "3GiB"}, {(1 << 20) + 1, "1048577"}} {
		t.Run(tc.want, func(t *testing.T) {
			if got := FormatSize(tc.in); got != tc.want {
				t.Fatalf("FormatSize(%d) = %q, want %q", tc.in, got, tc.want)
			}
			if n, err := ParseSize(tc.want); err != nil || n != tc.in {
				t.Fatalf("ParseSize(FormatSize(%d)) = %d, %v", tc.in, n, err)
			}
		})
	}
}

func TestAutoLimit(t *testing.T) {
	for _, tc := range []struct {
		name, meminfo string
		want          int64
	}{
		{"pi zero 512MB", "MemTotal:         439752 kB\nMemFree: 1 kB\n", 439752 * 1024 / 4},
		{"small", "MemTotal: 100000 kB\n", MinAutoLimit},
		{"large", "MemFree: 5 kB\nMemTotal: 24683628 kB\n", MaxAutoLimit},
		{"missing", "MemFree: 5 kB\n", MinAutoLimit},
		{"garbage", "MemTotal: lots\n", MinAutoLimit},
		{"empty", "", MinAutoLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AutoLimit([]byte(tc.meminfo)); got != tc.want {
				t.Fatalf("AutoLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	mi := []byte("MemTotal: 1048576 kB\n") // 1 GiB -> 256 MiB
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		name string
		o    Options
		want Applied
	}{
		{"defaults", Options{Env: env(nil)}, Applied{100, 256 << 20}},
		{"given", Options{Percent: 150, MemoryLimit: 96 << 20, Env: env(nil)}, Applied{150, 96 << 20}},
		{"off and no limit", Options{Percent: -1, MemoryLimit: -1, Env: env(nil)}, Applied{-1, math.MaxInt64}},
		{"environment wins over defaults", Options{Env: env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"})}, Applied{0, 0}},
		{"flags win over environment", Options{Percent: 200, MemoryLimit: 80 << 20, Env: env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"})}, Applied{200, 80 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Resolve(tc.o, mi); got != tc.want {
				t.Fatalf("Resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAppliedString(t *testing.T) {
	if got := (Applied{400, 128 << 20}).String(); got != "gc-percent=400 memory-limit=128MiB" {
		t.Fatal(got)
	}
	if got := (Applied{-1, math.MaxInt64}).String(); got != "gc-percent=off memory-limit=none" {
		t.Fatal(got)
	}
}

func FuzzParseSize(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < -1 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}
