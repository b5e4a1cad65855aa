//go:build !linux

package ovs

// CgroupRoot is where cgroup file systems are mounted (Linux only).
const CgroupRoot = "/sys/fs/cgroup"

// Cgroup is a stub outside Linux.
type Cgroup struct {
	Name string
	V2   bool
}

// CgroupV2 is false outside Linux.
func CgroupV2(root string) bool { return false }

// NewCgroup fails outside Linux.
func NewCgroup(root, name string) (*Cgroup, error) { return nil, ErrCgroupUnsupported }

// AddProcess fails outside Linux.
func (c *Cgroup) AddProcess(pid int) error { return ErrCgroupUnsupported }

// Set fails outside Linux.
func (c *Cgroup) Set(l Limits) error { return ErrCgroupUnsupported }

// MemoryUsage fails outside Linux.
func (c *Cgroup) MemoryUsage() (int64, error) { return 0, ErrCgroupUnsupported }

// Remove does nothing outside Linux.
func (c *Cgroup) Remove() error { return nil }

func cgroupDirsWithPrefix(root, prefix string) []*Cgroup { return nil }

// ProcsFiles is empty outside Linux.
func (c *Cgroup) ProcsFiles() []string { return nil }
