package capture

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// PortMatch says which UDP port a [UDPFilter] compares.
type PortMatch int

const (
	// DstPort matches the UDP destination port.
	DstPort PortMatch = iota
	// SrcPort matches the UDP source port.
	SrcPort
	// EitherPort matches a packet whose source or destination port matches.
	EitherPort
)

// Filter is a capture filter: a classic BPF program in x/net/bpf form. A
// program returns the number of bytes to keep (0 drops the packet).
type Filter []bpf.Instruction

// accept is a placeholder return value replaced by the snap length.
const accept = 0xffffffff

type asm struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  map[int][2]string // instruction index -> true/false labels
}

func (a *asm) op(in bpf.Instruction) { a.ins = append(a.ins, in) }
func (a *asm) label(l string)        { a.labels[l] = len(a.ins) }
func (a *asm) jmp(cond bpf.JumpTest, val uint32, t, f string) {
	a.jumps[len(a.ins)] = [2]string{t, f}
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val})
}

func (a *asm) resolve() Filter {
	for i, lf := range a.jumps {
		j := a.ins[i].(bpf.JumpIf)
		if lf[0] != "" {
			j.SkipTrue = uint8(a.labels[lf[0]] - i - 1)
		}
		if lf[1] != "" {
			j.SkipFalse = uint8(a.labels[lf[1]] - i - 1)
		}
		a.ins[i] = j
	}
	return a.ins
}

// UDPFilter keeps Ethernet frames carrying UDP over IPv4 (unfragmented) or
// IPv6 (UDP directly after the fixed header) whose port matches m; port 0
// keeps all such UDP.
func UDPFilter(port uint16, m PortMatch) Filter {
	a := &asm{labels: map[string]int{}, jumps: map[int][2]string{}}
	a.op(bpf.LoadAbsolute{Off: 12, Size: 2})
	a.jmp(bpf.JumpEqual, 0x0800, "", "v6")
	// IPv4
	a.op(bpf.LoadAbsolute{Off: 23, Size: 1})
	a.jmp(bpf.JumpEqual, 17, "", "drop")
	a.op(bpf.LoadAbsolute{Off: 20, Size: 2})
	a.jmp(bpf.JumpBitsSet, 0x1fff, "drop", "")
	if port == 0 {
		a.op(bpf.RetConstant{Val: accept})
	} else {
		a.op(bpf.LoadMemShift{Off: 14})
		portsAt(a, 14, true, port, m)
	}
	a.label("v6")
	a.jmp(bpf.JumpEqual, 0x86dd, "", "drop")
	a.op(bpf.LoadAbsolute{Off: 20, Size: 1})
	a.jmp(bpf.JumpEqual, 17, "", "drop")
	if port == 0 {
		a.op(bpf.RetConstant{Val: accept})
	} else {
		portsAt(a, 54, false, port, m)
	}
	a.label("drop")
	a.op(bpf.RetConstant{Val: 0})
	return a.resolve()
}

// portsAt compares the UDP ports at offset off (+X when indirect) and returns
// accept or jumps to "drop".
func portsAt(a *asm, off uint32, indirect bool, port uint16, m PortMatch) {
	load := func(o uint32) {
		if indirect {
			a.op(bpf.LoadIndirect{Off: o, Size: 2})
		} else {
			a.op(bpf.LoadAbsolute{Off: o, Size: 2})
		}
	}
	ok := fmt.Sprintf("ok%d", off)
	if m == SrcPort || m == EitherPort {
		load(off)
		next := "drop"
		if m == EitherPort {
			next = fmt.Sprintf("dst%d", off)
		}
		a.jmp(bpf.JumpEqual, uint32(port), ok, next)
	}
	if m == DstPort || m == EitherPort {
		a.label(fmt.Sprintf("dst%d", off))
		load(off + 2)
		a.jmp(bpf.JumpEqual, uint32(port), ok, "drop")
	}
	a.label(ok)
	a.op(bpf.RetConstant{Val: accept})
}

// ParseFilter parses the command-line filter syntax: "udp" (all UDP),
// "udp:PORT" (UDP with source or destination PORT) or "udp:dst:PORT" /
// "udp:src:PORT". It returns the program and the port (0 for all).
func ParseFilter(s string) (Filter, uint16, error) {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(s)), ":")
	if parts[0] != "udp" {
		return nil, 0, fmt.Errorf("filter %q: only udp filters are supported (udp, udp:PORT, udp:dst:PORT, udp:src:PORT)", s)
	}
	m := EitherPort
	switch len(parts) {
	case 1:
		return UDPFilter(0, EitherPort), 0, nil
	case 2:
	case 3:
		switch parts[1] {
		case "dst":
			m = DstPort
		case "src":
			m = SrcPort
		default:
			return nil, 0, fmt.Errorf("filter %q: %q is not src or dst", s, parts[1])
		}
		parts = []string{parts[0], parts[2]}
	default:
		return nil, 0, fmt.Errorf("filter %q: too many fields", s)
	}
	p, err := strconv.ParseUint(parts[1], 10, 16)
	if err != nil || p == 0 {
		return nil, 0, fmt.Errorf("filter %q: port must be 1..65535", s)
	}
	return UDPFilter(uint16(p), m), uint16(p), nil
}

// assemble assembles f (nil = accept all), adding a packet-type prefix for the
// direction and replacing accept returns by snap.
func assemble(f Filter, dir Direction, snap uint32) ([]bpf.RawInstruction, error) {
	var prog []bpf.Instruction
	switch dir {
	case In:
		prog = append(prog,
			bpf.LoadExtension{Num: bpf.ExtType},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(Outgoing), SkipTrue: 1},
			bpf.RetConstant{Val: 0})
	case Out:
		prog = append(prog,
			bpf.LoadExtension{Num: bpf.ExtType},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(Outgoing), SkipTrue: 1},
			bpf.RetConstant{Val: 0})
	}
	if len(f) == 0 {
		f = Filter{bpf.RetConstant{Val: accept}}
	}
	for _, in := range f {
		if r, ok := in.(bpf.RetConstant); ok && r.Val == accept {
			in = bpf.RetConstant{Val: snap}
		}
		prog = append(prog, in)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assemble capture filter: %w", err)
	}
	return raw, nil
}
