//go:build linux

package ovs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCgroupFileLayout checks which files a cgroup writes on v1 and v2
// hierarchies, on fake roots (plain directories), so the v2 path is tested
// on this v1 host too.
func TestCgroupFileLayout(t *testing.T) {
	tests := []struct {
		name  string
		v2    bool
		files map[string]string // path under root -> content after Set
		usage string            // usage file under root
	}{
		{"v1", false, map[string]string{
			"memory/ovsprobe-ovp00001/memory.limit_in_bytes": "33554432",
			"cpu/ovsprobe-ovp00001/cpu.cfs_quota_us":         "25000",
			"cpu/ovsprobe-ovp00001/cpu.cfs_period_us":        "100000",
		}, "memory/ovsprobe-ovp00001/memory.usage_in_bytes"},
		{"v2", true, map[string]string{
			"ovsprobe-ovp00001/memory.max": "33554432",
			"ovsprobe-ovp00001/cpu.max":    "25000 100000",
		}, "ovsprobe-ovp00001/memory.current"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.v2 {
				if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, d := range []string{"memory", "cpu"} {
					if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			cg, err := NewCgroup(root, "ovsprobe-ovp00001")
			if err != nil {
				t.Fatal(err)
			}
			if cg.V2 != tt.v2 {
				t.Fatalf("V2 = %v", cg.V2)
			}
			if err := cg.Set(Limits{MemoryBytes: 32 << 20, CPUs: 0.25}); err != nil {
				t.Fatal(err)
			}
			for f, want := range tt.files {
				b, err := os.ReadFile(filepath.Join(root, f))
				if err != nil || strings.TrimSpace(string(b)) != want {
					t.Errorf("%s = %q, %v; want %q", f, b, err, want)
				}
			}
			if err := os.WriteFile(filepath.Join(root, tt.usage), []byte("1234\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if u, err := cg.MemoryUsage(); err != nil || u != 1234 {
				t.Errorf("MemoryUsage = %d, %v", u, err)
			}
			if n := len(cg.ProcsFiles()); (tt.v2 && n != 1) || (!tt.v2 && n != 2) {
				t.Errorf("ProcsFiles = %v", cg.ProcsFiles())
			}
			if got := cgroupDirsWithPrefix(root, "ovsprobe-ovp"); len(got) != 1 || got[0].Name != "ovsprobe-ovp00001" {
				t.Errorf("cgroupDirsWithPrefix = %v", got)
			}
			if err := cg.Set(Limits{MemoryBytes: 1}); err == nil {
				t.Error("a 1-byte limit should be refused")
			}
		})
	}
}
