package main

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/lab"
	"github.com/quiot/quiot/probe/measure"
	"github.com/quiot/quiot/probe/stats"
)

func TestCheckMatched(t *testing.T) {
	dst := netip.MustParseAddrPort("10.0.0.2:9000")
	tests := []struct {
		name string
		res  measure.Result
		want string // "" = no error
	}{
		{"matched", measure.Result{Sent: 5, IngressSeen: 5, Matched: 5}, ""},
		{"ingress saw none", measure.Result{Sent: 5}, "in0 saw none of the 5 probe packets sent to 10.0.0.2:9000 (wrong interface or namespace?)"},
		{"egress saw none", measure.Result{Sent: 5, IngressSeen: 4}, "in0 saw 4 probe packets but eg0 saw none of them (are they forwarded between the two?)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMatched(&tc.res, "in0", "eg0", dst)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, lab.ErrNoTraffic) || !strings.HasSuffix(err.Error(), ": "+tc.want) {
				t.Fatalf("err = %v, want lab.ErrNoTraffic ending in %q", err, tc.want)
			}
		})
	}
}

func TestPrintMeasurement(t *testing.T) {
	s := stats.Summary{Min: 10, P50: 12.34, P99: 20, P999: 25, PDV: 15, Max: 30,
		P50CI: stats.CI{Lo: 12, Hi: 13}, P99CI: stats.CI{Lo: 19, Hi: 21}}
	res := measure.Result{Sent: 10, Matched: 8, Lost: 2, Duplicated: 1, Reordered: 3, IngressRingDrops: 4, EgressRingDrops: 5}
	counts := "in0 -> eg0: 10 sent, 8 matched, 2 lost, 1 duplicated, 3 reordered, ring drops 4/5\n" +
		"delay us: min 10.0  p50 12.3 [12.0, 13.0]  p99 20.0 [19.0, 21.0]  p99.9 25.0  PDV 15.0  max 30.0\n"
	tests := []struct {
		name       string
		firstOK    bool
		firstDelay time.Duration
		want       string
	}{
		{"no first packet", false, 0, counts},
		{"first packet", true, 45600 * time.Nanosecond, counts + "first packet (cold): 45.6 us\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := res
			r.FirstOK, r.FirstDelay = tc.firstOK, tc.firstDelay
			var b bytes.Buffer
			printMeasurement(&b, "in0", "eg0", &r, s)
			if b.String() != tc.want {
				t.Fatalf("output:\n%s\nwant:\n%s", b.String(), tc.want)
			}
			var row lab.Row
			setResults(&row, &r, s)
			if want := float64(tc.firstDelay) / 1e3; row.FirstDelayUS != want || row.Sent != 10 || row.EgressRingDrops != 5 || row.Stats != s {
				t.Fatalf("row = %+v, want FirstDelayUS %v and the counts and stats copied", row, want)
			}
		})
	}
}
