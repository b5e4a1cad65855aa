package qmetrics

import (
	"encoding/binary"
	"net"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmsg builds one control message as the kernel and quic-go lay it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func TestGSOSegmentSize(t *testing.T) {
	seg := make([]byte, 2)
	binary.NativeEndian.PutUint16(seg, 1252)
	ecn := cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{2, 0, 0, 0})
	tests := []struct {
		name string
		oob  []byte
		want int
	}{
		{"none", nil, 0},
		{"gso", cmsg(unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg), 1252},
		{"ecn only", ecn, 0},
		{"gso after ecn", append(append([]byte{}, ecn...), cmsg(unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg)...), 1252},
		{"truncated", []byte{1, 2, 3}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gsoSegmentSize(tt.oob); got != tt.want {
				t.Errorf("gsoSegmentSize = %d, want %d", got, tt.want)
			}
		})
	}
	oob := tests[3].oob
	if a := testing.AllocsPerRun(100, func() { gsoSegmentSize(oob) }); a != 0 {
		t.Errorf("gsoSegmentSize allocates %v times per call", a)
	}
}

// BenchmarkGSOSegmentSize is the per-write cost of finding the GSO segment
// size behind an ECN control message.
func BenchmarkGSOSegmentSize(b *testing.B) {
	seg := make([]byte, 2)
	binary.NativeEndian.PutUint16(seg, 1252)
	oob := append(cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{2, 0, 0, 0}), cmsg(unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg)...)
	for b.Loop() {
		gsoSegmentSize(oob)
	}
}

// gsoSupported reports whether this kernel offers UDP_SEGMENT, as quic-go
// checks it.
func gsoSupported(t *testing.T) bool {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { _, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT) }); err != nil {
		return false
	}
	return serr == nil
}
