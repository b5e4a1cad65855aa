package ovs

import (
	"os"
	"testing"
)

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseDpctlShow(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []DatapathStats
		wantErr bool
	}{
		{"fixture", readFixture(t, "dpctl-show.txt"), []DatapathStats{{Name: "netdev@ovs-netdev", Hit: 12, Missed: 6, Lost: 0, Flows: 6}}, false},
		{"two datapaths", "system@ovs-system:\n  lookups: hit:1 missed:2 lost:3\n  flows: 4\nnetdev@ovs-netdev:\n  lookups: hit:10 missed:20 lost:30\n  flows: 40\n",
			[]DatapathStats{{"system@ovs-system", 1, 2, 3, 4}, {"netdev@ovs-netdev", 10, 20, 30, 40}}, false},
		{"empty", "", nil, true},
		{"garbage first", "  lookups: hit:1\n", nil, true},
		{"bad count", "dp:\n  lookups: hit:x missed:0 lost:0\n", nil, true},
		{"bad flows", "dp:\n  flows: many\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDpctlShow(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %+v, want %+v", got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParsePMDStats(t *testing.T) {
	s, err := ParsePMDStats(readFixture(t, "pmd-stats-show.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		counter string
		want    float64
	}{
		{"packets received", 18},
		{"simple match hits", 12},
		{"miss with success upcall", 6},
		{"avg. datapath passes per packet", 1},
		{"emc hits", 0},
	}
	for _, tt := range tests {
		t.Run(tt.counter, func(t *testing.T) {
			if got := s.Total(tt.counter); got != tt.want {
				t.Fatalf("%s = %v, want %v", tt.counter, got, tt.want)
			}
		})
	}
	two := "pmd thread numa_id 0 core_id 1:\n  packets received: 5\n  idle cycles: 100 (50.00%)\nmain thread:\n  packets received: 7\n"
	s2, err := ParsePMDStats(two)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Total("packets received") != 12 || s2["pmd thread numa_id 0 core_id 1"]["idle cycles"] != 100 {
		t.Fatalf("got %v", s2)
	}
	for _, bad := range []string{"", "  packets received: 1\n"} {
		if _, err := ParsePMDStats(bad); err == nil {
			t.Fatalf("ParsePMDStats(%q) should fail", bad)
		}
	}
}

func TestParseAggregateVersionType(t *testing.T) {
	n, err := ParseAggregate(readFixture(t, "dump-aggregate.txt"))
	if err != nil || n != 2 {
		t.Fatalf("ParseAggregate = %d, %v", n, err)
	}
	for _, bad := range []string{"", "flow_count=x"} {
		if _, err := ParseAggregate(bad); err == nil {
			t.Fatalf("ParseAggregate(%q) should fail", bad)
		}
	}
	versions := []struct {
		in, want string
		wantErr  bool
	}{
		{"ovs-vswitchd (Open vSwitch) 3.1.0\n", "3.1.0", false},
		{"ovs-vsctl (Open vSwitch) 2.17.9\nDB Schema 8.3.0\n", "2.17.9", false},
		{"ovs-vswitchd (Open vSwitch)\n", "", true},
		{"bash: command not found", "", true},
	}
	for _, tt := range versions {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseVersion(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseVersion = %q, %v", got, err)
			}
		})
	}
	for in, want := range map[string]string{"netdev\n": "netdev", `""`: "system", "": "system", `"netdev"`: "netdev"} {
		if got := ParseDatapathType(in); got != want {
			t.Fatalf("ParseDatapathType(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseDpctlShow(f *testing.F) {
	f.Add("netdev@ovs-netdev:\n  lookups: hit:4 missed:6 lost:0\n  flows: 6\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseDpctlShow(s)
	})
}

func FuzzParsePMDStats(f *testing.F) {
	f.Add("main thread:\n  packets received: 10\n  idle cycles: 1 (2 %)\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParsePMDStats(s)
	})
}
