package match

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// frame builds Ethernet+IP+UDP with payload (checksums left zero).
func frame(src, dst netip.AddrPort, payload []byte, vlan bool) []byte {
	var b []byte
	b = append(b, make([]byte, 12)...)
	if vlan {
		b = append(b, 0x81, 0x00, 0x00, 0x05)
	}
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	if src.Addr().Is4() {
		b = append(b, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0], ip[9] = 0x45, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
		s, d := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		b = append(b, ip...)
	} else {
		b = append(b, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, 17
		binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = append(b, ip...)
	}
	b = append(b, udp...)
	return append(b, payload...)
}

func TestParseUDP(t *testing.T) {
	s4, d4 := netip.MustParseAddrPort("10.0.0.1:1234"), netip.MustParseAddrPort("10.0.0.2:4433")
	s6, d6 := netip.MustParseAddrPort("[fd00::1]:1234"), netip.MustParseAddrPort("[fd00::2]:4433")
	pl := []byte("hello")
	padded := append(frame(s4, d4, pl, false), 0, 0, 0, 0) // Ethernet padding
	frag := frame(s4, d4, pl, false)
	frag[14+6] = 0x20 // more fragments
	tcp := frame(s4, d4, pl, false)
	tcp[14+9] = 6
	tests := []struct {
		name     string
		b        []byte
		src, dst netip.AddrPort
		err      error
	}{
		{"ipv4", frame(s4, d4, pl, false), s4, d4, nil},
		{"ipv4 vlan", frame(s4, d4, pl, true), s4, d4, nil},
		{"ipv4 padded", padded, s4, d4, nil},
		{"ipv6", frame(s6, d6, pl, false), s6, d6, nil},
		{"fragment", frag, s4, d4, ErrNotUDP},
		{"tcp", tcp, s4, d4, ErrNotUDP},
		{"arp", append(make([]byte, 12), 0x08, 0x06, 0, 0), s4, d4, ErrNotUDP},
		{"short", make([]byte, 10), s4, d4, ErrShort},
		{"cut ip", frame(s4, d4, pl, false)[:30], s4, d4, ErrShort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := ParseUDP(tt.b)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if u.Src != tt.src || u.Dst != tt.dst || string(u.Payload) != "hello" || u.Len != 5 {
				t.Errorf("got %v -> %v %q len %d", u.Src, u.Dst, u.Payload, u.Len)
			}
		})
	}
	a, _ := ParseUDP(frame(s4, d4, []byte("a"), false))
	b, _ := ParseUDP(frame(s4, d4, []byte("b"), false))
	if PayloadHash(a) == PayloadHash(b) {
		t.Error("payload hash ignores the payload")
	}
	c, _ := ParseUDP(frame(s6, d6, []byte("a"), false))
	if FlowHash(a) == FlowHash(c) {
		t.Error("flow hash ignores the addresses")
	}
}

func FuzzParseUDP(f *testing.F) {
	f.Add(frame(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), []byte("x"), false))
	f.Add(frame(netip.MustParseAddrPort("[::1]:1"), netip.MustParseAddrPort("[::2]:2"), []byte("x"), true))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseUDP(b)
		if err == nil && len(u.Payload) > u.Len {
			t.Fatalf("payload %d > udp length %d", len(u.Payload), u.Len)
		}
	})
}
