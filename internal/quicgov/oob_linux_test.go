package quicgov

import (
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// cmsg appends a control message as quic-go builds them.
func cmsg(b []byte, level, typ int32, data []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, unix.CmsgSpace(len(data)))...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[start]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[start+unix.CmsgLen(0):], data)
	return b
}

func gsoMsg(b []byte, seg uint16) []byte {
	var d [2]byte
	*(*uint16)(unsafe.Pointer(&d[0])) = seg
	return cmsg(b, unix.IPPROTO_UDP, unix.UDP_SEGMENT, d[:])
}

func TestSplitGSO(t *testing.T) {
	tos := cmsg(nil, unix.IPPROTO_IP, unix.IP_TOS, []byte{2, 0, 0, 0})
	for _, tc := range []struct {
		name string
		oob  []byte
		seg  int
		rest []byte
	}{
		{"none", nil, 0, nil},
		{"ECN only", tos, 0, tos},
		{"GSO only", gsoMsg(nil, 1200), 1200, []byte{}},
		{"ECN then GSO", gsoMsg(bytes.Clone(tos), 1252), 1252, tos},
		{"GSO then ECN", append(gsoMsg(nil, 64), tos...), 64, tos},
		{"truncated", gsoMsg(nil, 1200)[:unix.SizeofCmsghdr+1], 0, gsoMsg(nil, 1200)[:unix.SizeofCmsghdr+1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seg, rest := splitGSO(tc.oob)
			if seg != tc.seg || !bytes.Equal(rest, tc.rest) {
				t.Fatalf("splitGSO = %d, %x; want %d, %x", seg, rest, tc.seg, tc.rest)
			}
		})
	}
}

// TestWrapKeepsOptimisations: on Linux, Wrap of a *net.UDPConn is what
// quic-go needs to keep GSO, ECN and batched reads.
func TestWrapKeepsOptimisations(t *testing.T) {
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	w := Wrap(u, true, nil)
	if _, ok := w.(interface {
		net.PacketConn
		SyscallConn() (syscall.RawConn, error)
		SetReadBuffer(int) error
		ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error)
		WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error)
		ReadBatch(ms []ipv4.Message, flags int) (int, error)
	}); !ok {
		t.Fatalf("%T is not an OOBCapablePacketConn with ReadBatch", w)
	}
}

// TestGSOSplit: a GSO write holding a short-header datagram and a probe
// to a known peer sends the short one and holds the probe.
func TestGSOSplit(t *testing.T) {
	r, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	o := Wrap(u, true, nil).(*oobConn)
	defer o.Close()
	now := time.Unix(1000, 0)
	o.now = func() time.Time { return now }
	o.afterFunc = func(time.Duration, func()) func() { return func() {} }
	to := r.LocalAddr().(*net.UDPAddr)
	write := func(b, oob []byte) {
		t.Helper()
		if n, _, err := o.WriteMsgUDP(b, oob, to); err != nil || n != len(b) {
			t.Fatalf("WriteMsgUDP = %d, %v", n, err)
		}
	}
	write(srvInitial([]byte{1, 1, 1, 1}), nil) // first connection
	now = now.Add(time.Second)
	o.received(cliFinished, to)
	write(srvInitial([]byte{2, 2, 2, 2}), nil) // second: first flight
	now = now.Add(200 * time.Millisecond)
	probe := long(0xc0, version1, []byte{2, 2, 2, 2}, cidB, []byte{}, 100)
	short := append([]byte{0x40}, make([]byte, len(probe)-1)...)
	short[1] = 0x55
	write(append(bytes.Clone(short), probe...), gsoMsg(nil, uint16(len(probe))))
	write([]byte{0x40, 0xee}, nil) // a marker: nothing else came before it
	var got [][]byte
	buf := make([]byte, 2048)
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(got) == 0 || !bytes.Equal(got[len(got)-1], []byte{0x40, 0xee}) {
		n, _, err := r.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
		got = append(got, bytes.Clone(buf[:n]))
	}
	if len(got) != 4 || !bytes.Equal(got[2], short) {
		t.Fatalf("received %d datagrams (want 2 first flights, the short one, the marker)", len(got))
	}
	if s := o.Stats(); s.Held != 1 {
		t.Fatalf("stats %+v, want 1 held", s)
	}
}

// TestReadKeeps0RTT: through ReadBatch (quic-go's reads on Linux) and
// ReadMsgUDP, 0-RTT datagrams that come before their Initial are taken
// out of what is read and handed over after the Initial, with the packet
// info they were read with.
func TestReadKeeps0RTT(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func(*oobConn) ([]ipv4.Message, error)
	}{
		{"ReadBatch", func(o *oobConn) ([]ipv4.Message, error) {
			ms := make([]ipv4.Message, 8)
			for i := range ms {
				ms[i].Buffers = [][]byte{make([]byte, 1500)}
				ms[i].OOB = make([]byte, 128)
			}
			n, err := o.ReadBatch(ms, 0)
			return ms[:n], err
		}},
		{"ReadMsgUDP", func(o *oobConn) ([]ipv4.Message, error) {
			b, oob := make([]byte, 1500), make([]byte, 128)
			n, oobn, flags, addr, err := o.ReadMsgUDP(b, oob)
			return []ipv4.Message{{Buffers: [][]byte{b}, OOB: oob, N: n, NN: oobn, Flags: flags, Addr: addr}}, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			if err := ipv4.NewPacketConn(u).SetControlMessage(ipv4.FlagDst, true); err != nil {
				t.Fatal(err)
			}
			o := Wrap(u, true, nil).(*oobConn)
			defer o.Close()
			s, err := net.DialUDP("udp", nil, u.LocalAddr().(*net.UDPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			dcid := []byte{0xd1, 1, 1, 1, 1, 1, 1, 1}
			z1, z2, ini := cli0RTT(dcid, 1, 100), cli0RTT(dcid, 2, 100), cliInitialTo(dcid)
			want := [][]byte{short1, ini, z1, z2}
			for _, p := range [][]byte{z1, short1, z2, ini} {
				if _, err := s.Write(p); err != nil {
					t.Fatal(err)
				}
			}
			_ = u.SetReadDeadline(time.Now().Add(10 * time.Second))
			var got [][]byte
			for len(got) < len(want) {
				ms, err := tc.read(o)
				if err != nil {
					t.Fatalf("after %d datagrams: %v", len(got), err)
				}
				for _, m := range ms {
					p := bytes.Clone(m.Buffers[0][:m.N])
					got = append(got, p)
					if !hasPktInfo(t, m.OOB[:m.NN]) {
						t.Fatalf("datagram %d (%06b) without its packet info", len(got), First(p))
					}
				}
			}
			if !equalDatagrams(got, want) {
				t.Fatalf("read %s, want %s", describe(got), describe(want))
			}
			if st := o.Stats(); st.ZeroRTTHeld != 2 || st.ZeroRTTMatched != 2 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// hasPktInfo reports whether oob holds an IP_PKTINFO control message.
func hasPktInfo(t *testing.T, oob []byte) bool {
	t.Helper()
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms {
		if cm.Header.Level == unix.IPPROTO_IP && cm.Header.Type == unix.IP_PKTINFO {
			return true
		}
	}
	return false
}
