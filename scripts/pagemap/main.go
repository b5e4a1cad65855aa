// Command pagemap reports which pages of a running Go program's binary are
// resident in its address space, per ELF section and per package: what a
// process's RssFile (and the file-backed part of .noptrdata and .data) is
// made of. It reads /proc/PID/pagemap (root) and the symbol table of an
// unstripped build with the same layout (the same go build command without
// -ldflags "-s -w": stripping drops the symbol table and DWARF, which are
// not loaded, and leaves the addresses alone; the tool checks the section
// addresses against the running binary's mappings).
//
//	go run ./scripts/pagemap PID UNSTRIPPED_BINARY [DEPTH]
//
// PID "self" is the tool's own process (its test reads itself).
//
// DEPTH (3) is how many path elements of a package name are kept, so
// github.com/quic-go/quic-go/http3 counts under github.com/quic-go/quic-go.
// A page counts for every symbol that overlaps it, in proportion to the
// bytes of the symbol on it. The kernel maps up to 64 KiB around each page
// fault on a file (fault-around), so a resident page was not necessarily
// touched; the figures say what is mapped, as RSS does. See docs/BENCH.md.
package main

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/quiot/quiot/internal/startpages"
)

const pageSize = 4096

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pagemap:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) < 2 || len(args) > 3 {
		return errors.New("usage: pagemap PID UNSTRIPPED_BINARY [DEPTH]")
	}
	pid := args[0]
	if n, err := strconv.Atoi(pid); pid != "self" && (err != nil || n <= 0) {
		return fmt.Errorf("pid %q: not a process id", pid)
	}
	depth := 3
	if len(args) == 3 {
		var err error
		if depth, err = strconv.Atoi(args[2]); err != nil || depth < 1 {
			return fmt.Errorf("depth %q: not a positive number", args[2])
		}
	}
	f, err := elf.Open(args[1])
	if err != nil {
		return fmt.Errorf("couldn't read the binary: %w", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s has no symbol table (build it without -s): %w", args[1], err)
	}
	pm, err := os.Open("/proc/" + pid + "/pagemap")
	if err != nil {
		return fmt.Errorf("couldn't open the page map (root needed): %w", err)
	}
	defer pm.Close()
	if err := checkLayout(pid, f); err != nil {
		return err
	}
	r := &resident{pm: pm, cache: map[uint64]bool{}}

	w := bufio.NewWriter(out)
	defer w.Flush()
	fmt.Fprintf(w, "%-16s %10s %10s\n", "section", "size KiB", "resident")
	for _, s := range f.Sections {
		if s.Addr == 0 || s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS {
			continue
		}
		n := 0
		for a := s.Addr &^ (pageSize - 1); a < s.Addr+s.Size; a += pageSize {
			p, err := r.present(a)
			if err != nil {
				return err
			}
			if p {
				n++
			}
		}
		fmt.Fprintf(w, "%-16s %10d %10d\n", s.Name, s.Size/1024, n*pageSize/1024)
	}

	byPkg, total, err := attribute(syms, f.Sections, r, depth)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(byPkg))
	for k := range byPkg {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return byPkg[keys[i]] > byPkg[keys[j]] })
	fmt.Fprintf(w, "\n%10s %10s  %s\n", "resident", "of KiB", "section package")
	for _, k := range keys {
		if byPkg[k] < 16<<10 {
			break
		}
		fmt.Fprintf(w, "%10.0f %10.0f  %s\n", byPkg[k]/1024, total[k]/1024, k)
	}
	return nil
}

// checkLayout fails when the binary's sections are not where the running
// program has the executable's mappings (a different build).
func checkLayout(pid string, f *elf.File) error {
	maps, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil {
		return fmt.Errorf("couldn't read the process's maps: %w", err)
	}
	text := f.Section(".text")
	if text == nil {
		return errors.New("the binary has no .text section")
	}
	ms, err := startpages.ParseMaps(string(maps))
	if err != nil {
		return fmt.Errorf("process %s: %w", pid, err)
	}
	for _, m := range ms {
		if m.Path != "" && strings.Contains(m.Perms, "x") && m.Start <= text.Addr && text.Addr+text.Size <= m.End {
			return nil
		}
	}
	return fmt.Errorf("no executable mapping of process %s holds the binary's .text at %#x: not the same build", pid, text.Addr)
}

// resident reads present bits from /proc/PID/pagemap.
type resident struct {
	pm    *os.File
	cache map[uint64]bool
}

func (r *resident) present(addr uint64) (bool, error) {
	pg := addr &^ (pageSize - 1)
	if p, ok := r.cache[pg]; ok {
		return p, nil
	}
	var b [8]byte
	if _, err := r.pm.ReadAt(b[:], int64(pg/pageSize*8)); err != nil {
		return false, fmt.Errorf("couldn't read the page map at %#x: %w", pg, err)
	}
	p := binary.LittleEndian.Uint64(b[:])&(1<<63) != 0
	r.cache[pg] = p
	return p, nil
}

// attribute sums, per "section package", the bytes of symbols on resident
// pages (byPkg) and in all (total).
func attribute(syms []elf.Symbol, secs []*elf.Section, r *resident, depth int) (byPkg, total map[string]float64, err error) {
	sort.Slice(syms, func(i, j int) bool { return syms[i].Value < syms[j].Value })
	byPkg, total = map[string]float64{}, map[string]float64{}
	for i, s := range syms {
		if s.Section <= 0 || int(s.Section) >= len(secs) {
			continue
		}
		sec := secs[s.Section].Name
		switch sec {
		case ".text", ".rodata", ".noptrdata", ".data", ".gopclntab":
		default:
			continue
		}
		size := s.Size
		if size == 0 && i+1 < len(syms) {
			size = syms[i+1].Value - s.Value
		}
		key := sec + " " + pkgOf(s.Name, depth)
		for a := s.Value; a < s.Value+size; {
			end := min((a&^(pageSize-1))+pageSize, s.Value+size)
			p, err := r.present(a)
			if err != nil {
				return nil, nil, err
			}
			if p {
				byPkg[key] += float64(end - a)
			}
			total[key] += float64(end - a)
			a = end
		}
	}
	return byPkg, total, nil
}

// pkgOf is the package of a Go symbol name, cut to depth path elements:
// "github.com/quic-go/quic-go/http3.(*Conn).x" -> "github.com/quic-go/quic-go".
func pkgOf(name string, depth int) string {
	slash := strings.LastIndex(name, "/")
	p := name
	if dot := strings.Index(name[slash+1:], "."); dot >= 0 {
		p = name[:slash+1+dot]
	}
	if parts := strings.Split(p, "/"); len(parts) > depth {
		p = strings.Join(parts[:depth], "/")
	}
	return p
}
