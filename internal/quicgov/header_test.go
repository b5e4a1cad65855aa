package quicgov

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// long builds a long-header packet: first byte b, version v, the
// connection IDs, for an Initial (token != nil) the token, then the
// Length field (a 2-byte varint) and payload bytes.
func long(b byte, v uint32, dcid, scid, token []byte, payload int) []byte {
	p := []byte{b, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	p = append(p, byte(len(dcid)))
	p = append(p, dcid...)
	p = append(p, byte(len(scid)))
	p = append(p, scid...)
	if token != nil {
		p = append(p, byte(len(token)))
		p = append(p, token...)
	}
	p = append(p, 0x40|byte(payload>>8), byte(payload))
	return append(p, make([]byte, payload)...)
}

func cat(ps ...[]byte) []byte { return bytes.Join(ps, nil) }

var (
	cidA = []byte{1, 2, 3, 4}
	cidB = []byte{5, 6, 7, 8, 9, 10, 11, 12}
	// v1 packets.
	initial1   = long(0xc0, version1, cidA, cidB, []byte{}, 40)
	initialTok = long(0xc3, version1, cidA, cidB, []byte{0xaa, 0xbb, 0xcc}, 30)
	zeroRTT1   = long(0xd0, version1, cidA, cidB, nil, 20)
	handshake1 = long(0xe0, version1, cidA, cidB, nil, 50)
	retry1     = append([]byte{0xf0, 0, 0, 0, 1, 4, 1, 2, 3, 4, 0}, make([]byte, 24)...)
	short1     = append([]byte{0x40}, make([]byte, 30)...)
	// v2 packets (RFC 9369: Initial 0b01, 0-RTT 0b10, Handshake 0b11, Retry 0b00).
	initial2   = long(0xd0, version2, cidA, cidB, []byte{}, 40)
	handshake2 = long(0xf0, version2, cidA, cidB, nil, 50)
	zeroRTT2   = long(0xe0, version2, cidA, cidB, nil, 20)
	vn         = []byte{0x80, 0, 0, 0, 0, 4, 1, 2, 3, 4, 4, 5, 6, 7, 8, 0, 0, 0, 1}
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    []byte
		want Kinds
		err  error
	}{
		{"empty", nil, 0, ErrEmpty},
		{"short", short1, Short, nil},
		{"short without the fixed bit", []byte{0x00, 1, 2}, 0, ErrFixedBit},
		{"initial", initial1, Initial, nil},
		{"initial with a token", initialTok, Initial, nil},
		{"0-RTT", zeroRTT1, ZeroRTT, nil},
		{"handshake", handshake1, Handshake, nil},
		{"retry", retry1, Retry, nil},
		{"version negotiation", vn, VersionNegotiation, nil},
		{"initial + handshake", cat(initial1, handshake1), Initial | Handshake, nil},
		{"initial + handshake + short", cat(initial1, handshake1, short1), Initial | Handshake | Short, nil},
		{"initial + 0-RTT", cat(initial1, zeroRTT1), Initial | ZeroRTT, nil},
		{"trailing zero padding", cat(initial1, make([]byte, 100)), Initial, nil},
		{"v2 initial + handshake", cat(initial2, handshake2), Initial | Handshake, nil},
		{"v2 0-RTT", zeroRTT2, ZeroRTT, nil},
		{"v2 initial + 0-RTT", cat(initial2, zeroRTT2), Initial | ZeroRTT, nil},
		{"unknown version", long(0xc0, 0x0a0a0a0a, cidA, cidB, []byte{}, 10), 0, ErrVersion},
		{"long without the fixed bit", []byte{0x80, 0, 0, 0, 1, 0, 0, 0}, 0, ErrFixedBit},
		{"truncated header", initial1[:6], 0, ErrTruncated},
		{"truncated connection ID", initial1[:8], 0, ErrTruncated},
		{"truncated payload", initial1[:len(initial1)-1], 0, ErrTruncated},
		{"handshake after initial truncated", cat(initial1, handshake1[:20]), Initial, ErrTruncated},
		{"connection ID too long", long(0xe0, version1, make([]byte, 21), cidB, nil, 5), 0, ErrConnID},
		{"token longer than the packet", []byte{0xc0, 0, 0, 0, 1, 0, 0, 0x10, 1}, 0, ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.d)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Parse = %06b, %v; want %06b, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		k         Kinds
		long, hsk bool
	}{
		{Short, false, false},
		{Initial, true, false},
		{Initial | Handshake | Short, true, true},
		{0, false, false},
	} {
		if tc.k.Long() != tc.long || tc.k.Has(Handshake) != tc.hsk {
			t.Errorf("%06b: Long %v Has(Handshake) %v; want %v %v", tc.k, tc.k.Long(), tc.k.Has(Handshake), tc.long, tc.hsk)
		}
	}
}

func TestFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    []byte
		want Kinds
	}{
		{"empty", nil, 0},
		{"short", short1, Short},
		{"short without the fixed bit", []byte{0x00, 1}, 0},
		{"initial + 0-RTT", cat(initial1, zeroRTT1), Initial},
		{"0-RTT", zeroRTT1, ZeroRTT},
		{"0-RTT, truncated payload", zeroRTT1[:10], ZeroRTT},
		{"v2 0-RTT", zeroRTT2, ZeroRTT},
		{"v2 initial", initial2, Initial},
		{"handshake", handshake1, Handshake},
		{"retry", retry1, Retry},
		{"version negotiation", vn, VersionNegotiation},
		{"long header, no version", []byte{0xd0, 0, 0}, 0},
		{"long without the fixed bit", []byte{0x90, 0, 0, 0, 1}, 0},
		{"unknown version", long(0xd0, 0x0a0a0a0a, cidA, cidB, nil, 10), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := First(tc.d); got != tc.want {
				t.Fatalf("First = %06b; want %06b", got, tc.want)
			}
		})
	}
}

func TestDestConnID(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    []byte
		want []byte
	}{
		{"initial", initial1, cidA},
		{"handshake", handshake1, cidA},
		{"short", short1, nil},
		{"truncated", initial1[:7], nil},
		{"too long", long(0xe0, version1, make([]byte, 21), cidB, nil, 5), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DestConnID(tc.d); !bytes.Equal(got, tc.want) {
				t.Fatalf("DestConnID = %x; want %x", got, tc.want)
			}
		})
	}
}

// FuzzParse: Parse never panics, and what it reports is consistent with
// the first byte.
func FuzzParse(f *testing.F) {
	for _, d := range [][]byte{initial1, initialTok, zeroRTT1, handshake1, retry1, short1, vn, initial2,
		cat(initial1, handshake1, short1), cat(initial2, handshake2), zeroRTT2, cat(initial2, zeroRTT2)} {
		f.Add(d)
	}
	// Every datagram also goes through the read path's 0-RTT keeping
	// (early.go), from one of two addresses: it must not panic, and what
	// it keeps it hands over at its Initial, at the latest.
	c := New(&fakeConn{}, Options{MaxPeers: 8})
	f.Fuzz(func(t *testing.T, d []byte) {
		k, err := Parse(d)
		_ = DestConnID(d)
		first := First(d)
		if err == nil && len(d) > 0 && (first == 0 || !k.Has(first)) {
			t.Fatalf("Parse = %06b, First = %06b for %x", k, first, d)
		}
		from := peer1
		if len(d) > 0 && d[len(d)-1]&1 != 0 {
			from = peer2
		}
		if c.admit(d, nil, 0, from) && first != ZeroRTT {
			t.Fatalf("kept a datagram whose first packet is %06b: %x", first, d)
		}
		for {
			if _, ok := c.nextPending(); !ok {
				break
			}
		}
		if len(d) == 0 {
			if err == nil {
				t.Fatal("no error for an empty datagram")
			}
			return
		}
		if err == nil && k == 0 && d[0]&0x40 != 0 {
			t.Fatalf("no packet and no error for %x", d)
		}
		if d[0]&0x80 == 0 && k&^Short != 0 {
			t.Fatalf("short header reported as %06b", k)
		}
	})
}

// TestFuzzCorpus: the committed corpus (testdata/fuzz/FuzzParse) exists,
// so plain go test replays it.
func TestFuzzCorpus(t *testing.T) {
	ents, err := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzParse"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("no fuzz corpus: %v", err)
	}
}
