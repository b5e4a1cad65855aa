package startpages

import (
	"fmt"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // [Start, End) virtual addresses
	Perms      string // "r-xp" and the like
	Offset     uint64 // offset in the file
	Inode      uint64 // 0 for anonymous memory
	Path       string // file path, "[heap]" and the like, or ""
}

// ReadOnlyFile reports whether m maps a file without write permission: the
// kind of mapping whose pages can be dropped and read again from the file.
func (m Mapping) ReadOnlyFile() bool {
	return m.Inode != 0 && len(m.Perms) == 4 && m.Perms[0] == 'r' && m.Perms[1] == '-'
}

// ParseMaps parses the text of /proc/PID/maps.
func ParseMaps(text string) ([]Mapping, error) {
	var out []Mapping
	for n, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseLine parses "start-end perms offset dev inode [path]".
func parseLine(line string) (Mapping, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return Mapping{}, fmt.Errorf("%d fields, want at least 5: %q", len(f), line)
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Mapping{}, fmt.Errorf("address range %q has no '-'", f[0])
	}
	var m Mapping
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("start address: %w", err)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("end address: %w", err)
	}
	if m.End < m.Start {
		return Mapping{}, fmt.Errorf("address range %q ends before it starts", f[0])
	}
	if len(f[1]) != 4 {
		return Mapping{}, fmt.Errorf("permissions %q are not 4 characters", f[1])
	}
	m.Perms = f[1]
	if m.Offset, err = strconv.ParseUint(f[2], 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("offset: %w", err)
	}
	if m.Inode, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return Mapping{}, fmt.Errorf("inode: %w", err)
	}
	if len(f) > 5 {
		m.Path = afterFields(line, 5) // the path may hold spaces
	}
	return m, nil
}

// afterFields returns line without its first n space-separated fields and
// the spaces around them.
func afterFields(line string, n int) string {
	rest := line
	for range n {
		rest = strings.TrimLeft(rest, " \t")
		if i := strings.IndexAny(rest, " \t"); i >= 0 {
			rest = rest[i:]
		} else {
			return ""
		}
	}
	return strings.TrimSpace(rest)
}
