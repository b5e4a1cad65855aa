package bench

import "strings"

// parseCPUModel returns the first "model name" (x86) or "Hardware"/"Model"
// (ARM) value of a /proc/cpuinfo text.
func parseCPUModel(cpuinfo string) string {
	var alt string
	for line := range strings.SplitSeq(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			return v
		case "Model", "Hardware":
			if alt == "" {
				alt = v
			}
		}
	}
	return alt
}
