package ovs

import (
	"slices"
	"testing"
)

func TestParseLinkNames(t *testing.T) {
	out := "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue\n" +
		"7: ovp1a2b3og1@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n" +
		"9: ovs-netdev: <BROADCAST,MULTICAST,PROMISC> mtu 1500\n\n garbage\n"
	got := ParseLinkNames(out)
	want := []string{"lo", "ovp1a2b3og1", "ovs-netdev"}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseLinkNames = %v, want %v", got, want)
	}
}

func TestNamePatterns(t *testing.T) {
	tests := []struct {
		name       string
		id, member bool
	}{
		{"ovp1a2b3", true, true},
		{"ovp1a2b3og1", false, true},
		{"ovp1a2b3br", false, true},
		{"ovpzzzzz", false, false},
		{"eth0", false, false},
		{"ovp1a2b", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := idRE.MatchString(tt.name); got != tt.id {
				t.Errorf("id match %v, want %v", got, tt.id)
			}
			if got := nameRE.MatchString(tt.name); got != tt.member {
				t.Errorf("name match %v, want %v", got, tt.member)
			}
		})
	}
}

func TestIsTestbedDaemon(t *testing.T) {
	cmd := "ovs-vswitchd\x00unix:/tmp/ovsprobe-ovp1a2b3/db.sock\x00--disable-system\x00"
	tests := []struct {
		name, cmdline, stat string
		want                bool
	}{
		{"live", cmd, "123 (ovs-vswitchd) S 1 2 3", true},
		{"zombie", cmd, "123 (ovs-vswitchd) Z 1 2 3", false},
		{"system ovs", "ovs-vswitchd\x00unix:/var/run/openvswitch/db.sock\x00", "1 (ovs-vswitchd) S", false},
		{"other program", "bash\x00/tmp/ovsprobe-ovp1a2b3\x00", "1 (bash) S", false},
		{"ovsdb", "/usr/sbin/ovsdb-server\x00/tmp/ovsprobe-ovp1a2b3/conf.db\x00", "5 (ovsdb-server) R", true},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isTestbedDaemon(tt.cmdline, tt.stat); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
