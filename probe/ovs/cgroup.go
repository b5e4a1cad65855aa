package ovs

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrCgroupUnsupported is returned where cgroups are not available.
var ErrCgroupUnsupported = errors.New("cgroups are not supported on this platform")

// Limits are the resources given to ovs-vswitchd.
type Limits struct {
	// MemoryBytes caps memory (cgroup v1 memory.limit_in_bytes, v2
	// memory.max); 0 means unlimited.
	MemoryBytes int64
	// CPUs caps CPU time in cores (CFS quota over a 100 ms period: v1
	// cpu.cfs_quota_us, v2 cpu.max); 0 means unlimited.
	CPUs float64
}

// cfsPeriodUS is the CFS period used for CPU quotas.
const cfsPeriodUS = 100000

// v1MemoryValue is what goes into memory.limit_in_bytes.
func v1MemoryValue(b int64) string {
	if b <= 0 {
		return "-1"
	}
	return strconv.FormatInt(b, 10)
}

// v1QuotaValue is what goes into cpu.cfs_quota_us.
func v1QuotaValue(cpus float64) string {
	if cpus <= 0 {
		return "-1"
	}
	return strconv.FormatInt(quotaUS(cpus), 10)
}

// v2MemoryValue is what goes into memory.max.
func v2MemoryValue(b int64) string {
	if b <= 0 {
		return "max"
	}
	return strconv.FormatInt(b, 10)
}

// v2CPUMaxValue is what goes into cpu.max.
func v2CPUMaxValue(cpus float64) string {
	if cpus <= 0 {
		return fmt.Sprintf("max %d", cfsPeriodUS)
	}
	return fmt.Sprintf("%d %d", quotaUS(cpus), cfsPeriodUS)
}

func quotaUS(cpus float64) int64 {
	q := int64(cpus * cfsPeriodUS)
	if q < 1000 {
		q = 1000 // the kernel's minimum quota is 1 ms
	}
	return q
}

// Validate reports a limit that makes no sense.
func (l Limits) Validate() error {
	if l.MemoryBytes < 0 {
		return fmt.Errorf("negative memory limit %d", l.MemoryBytes)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		return fmt.Errorf("memory limit %d bytes is below 4 MiB: ovs-vswitchd cannot run", l.MemoryBytes)
	}
	if l.CPUs < 0 {
		return fmt.Errorf("negative CPU quota %g", l.CPUs)
	}
	return nil
}
