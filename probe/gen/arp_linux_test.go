//go:build linux

package gen

import (
	"net/netip"
	"testing"
)

func TestLookupARP(t *testing.T) {
	table := []byte(`IP address       HW type     Flags       HW address            Mask     Device
10.201.0.2       0x1         0x6         02:00:00:00:02:01     *        opg0
10.201.0.3       0x1         0x0         00:00:00:00:00:00     *        opg0
10.201.0.4       0x1         0x2         02:00:00:00:02:04     *        other
`)
	tests := []struct {
		ip, dev, want string
	}{
		{"10.201.0.2", "opg0", "02:00:00:00:02:01"},
		{"10.201.0.3", "opg0", ""}, // incomplete
		{"10.201.0.4", "opg0", ""}, // other device
		{"10.201.0.9", "opg0", ""},
	}
	for _, tt := range tests {
		got := lookupARP(table, netip.MustParseAddr(tt.ip), tt.dev)
		if (got == nil && tt.want != "") || (got != nil && got.String() != tt.want) {
			t.Errorf("lookupARP(%s, %s) = %v, want %q", tt.ip, tt.dev, got, tt.want)
		}
	}
	if lookupARP(nil, netip.MustParseAddr("10.0.0.1"), "x") != nil {
		t.Error("empty table")
	}
}
