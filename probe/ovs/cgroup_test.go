package ovs

import "testing"

func TestCgroupValues(t *testing.T) {
	tests := []struct {
		name             string
		l                Limits
		v1mem, v1q       string
		v2mem, v2cpu     string
		wantValidateFail bool
	}{
		{"unlimited", Limits{}, "-1", "-1", "max", "max 100000", false},
		{"64MiB half core", Limits{MemoryBytes: 64 << 20, CPUs: 0.5}, "67108864", "50000", "67108864", "50000 100000", false},
		{"two cores", Limits{CPUs: 2}, "-1", "200000", "max", "200000 100000", false},
		{"tiny quota clamps", Limits{CPUs: 0.001}, "-1", "1000", "max", "1000 100000", false},
		{"too little memory", Limits{MemoryBytes: 1 << 20}, "", "", "", "", true},
		{"negative", Limits{MemoryBytes: -1}, "", "", "", "", true},
		{"negative cpu", Limits{CPUs: -1}, "", "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.l.Validate(); (err != nil) != tt.wantValidateFail {
				t.Fatalf("Validate = %v", err)
			}
			if tt.wantValidateFail {
				return
			}
			if got := v1MemoryValue(tt.l.MemoryBytes); got != tt.v1mem {
				t.Errorf("v1 memory %q, want %q", got, tt.v1mem)
			}
			if got := v1QuotaValue(tt.l.CPUs); got != tt.v1q {
				t.Errorf("v1 quota %q, want %q", got, tt.v1q)
			}
			if got := v2MemoryValue(tt.l.MemoryBytes); got != tt.v2mem {
				t.Errorf("v2 memory %q, want %q", got, tt.v2mem)
			}
			if got := v2CPUMaxValue(tt.l.CPUs); got != tt.v2cpu {
				t.Errorf("v2 cpu.max %q, want %q", got, tt.v2cpu)
			}
		})
	}
}
