package capture

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

func udpFrame(v6 bool, sport, dport uint16, fragOff uint16) []byte {
	b := make([]byte, 12)
	var ip []byte
	if v6 {
		b = append(b, 0x86, 0xdd)
		ip = make([]byte, 40)
		ip[0], ip[6] = 0x60, 17
	} else {
		b = append(b, 0x08, 0x00)
		ip = make([]byte, 24) // with 4 bytes of options: IHL 6
		ip[0], ip[9] = 0x46, 17
		binary.BigEndian.PutUint16(ip[6:], fragOff)
	}
	b = append(b, ip...)
	u := make([]byte, 8+10)
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	return append(b, u...)
}

func TestUDPFilter(t *testing.T) {
	tcp := udpFrame(false, 1, 4433, 0)
	tcp[14+9] = 6
	arp := append(make([]byte, 12), 0x08, 0x06, 0, 0, 0, 0)
	tests := []struct {
		name  string
		port  uint16
		m     PortMatch
		frame []byte
		keep  bool
	}{
		{"v4 dst", 4433, DstPort, udpFrame(false, 1000, 4433, 0), true},
		{"v4 dst other", 4433, DstPort, udpFrame(false, 4433, 1000, 0), false},
		{"v4 src", 4433, SrcPort, udpFrame(false, 4433, 1000, 0), true},
		{"v4 src other", 4433, SrcPort, udpFrame(false, 1000, 4433, 0), false},
		{"v4 either dst", 4433, EitherPort, udpFrame(false, 1000, 4433, 0), true},
		{"v4 either src", 4433, EitherPort, udpFrame(false, 4433, 1000, 0), true},
		{"v4 either none", 4433, EitherPort, udpFrame(false, 1, 2, 0), false},
		{"v4 fragment", 4433, DstPort, udpFrame(false, 1000, 4433, 0x0010), false},
		{"v4 first fragment MF", 4433, DstPort, udpFrame(false, 1000, 4433, 0x2000), true},
		{"v6 dst", 4433, DstPort, udpFrame(true, 1000, 4433, 0), true},
		{"v6 either src", 4433, EitherPort, udpFrame(true, 4433, 1, 0), true},
		{"v6 other", 4433, EitherPort, udpFrame(true, 1, 2, 0), false},
		{"any udp", 0, EitherPort, udpFrame(true, 1, 2, 0), true},
		{"tcp", 4433, EitherPort, tcp, false},
		{"arp", 0, EitherPort, arp, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prog := UDPFilter(tt.port, tt.m)
			for i, in := range prog {
				if r, ok := in.(bpf.RetConstant); ok && r.Val == accept {
					prog[i] = bpf.RetConstant{Val: 256}
				}
			}
			vm, err := bpf.NewVM(prog)
			if err != nil {
				t.Fatal(err)
			}
			n, err := vm.Run(tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			if (n > 0) != tt.keep {
				t.Errorf("kept %d bytes, want keep=%v", n, tt.keep)
			}
		})
	}
}

func TestParseFilter(t *testing.T) {
	tests := []struct {
		in   string
		port uint16
		ok   bool
	}{
		{"udp", 0, true}, {"udp:4433", 4433, true}, {"UDP:dst:53", 53, true}, {"udp:src:1", 1, true},
		{"tcp:80", 0, false}, {"udp:0", 0, false}, {"udp:70000", 0, false}, {"udp:x", 0, false},
		{"udp:mid:5", 0, false}, {"udp:a:b:c", 0, false}, {"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			f, port, err := ParseFilter(tt.in)
			if (err == nil) != tt.ok || port != tt.port || (tt.ok && len(f) == 0) {
				t.Errorf("ParseFilter(%q) = %d, %v", tt.in, port, err)
			}
		})
	}
}

func TestAssembleDirection(t *testing.T) {
	for _, d := range []Direction{Any, In, Out} {
		raw, err := assemble(UDPFilter(4433, DstPort), d, 128)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) == 0 {
			t.Fatal("empty program")
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"ok", Options{Interface: "eth0"}, true},
		{"no interface", Options{}, false},
		{"snap", Options{Interface: "eth0", SnapLen: 10}, false},
		{"block size", Options{Interface: "eth0", BlockSize: 5000}, false},
		{"blocks", Options{Interface: "eth0", Blocks: 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.o.setDefaults(); (err == nil) != tt.ok {
				t.Errorf("setDefaults = %v", err)
			}
		})
	}
}
