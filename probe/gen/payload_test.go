package gen

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestEncodeDecode(t *testing.T) {
	sent := time.Unix(1700000000, 123456789)
	tests := []struct {
		name    string
		size    int
		h       Header
		hasTime bool
	}{
		{"min", MinHeaderLen, Header{Seq: 1, Flow: 2, Sent: sent}, false},
		{"short", HeaderLen - 1, Header{Seq: 1 << 60, Flow: 7, Sent: sent}, false},
		{"full", HeaderLen, Header{Seq: 42, Flow: 65535, Sent: sent}, true},
		{"padded", 1458, Header{Seq: ^uint64(0), Flow: ^uint32(0), Sent: sent}, true},
		{"no time", 100, Header{Seq: 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := make([]byte, tt.size)
			if err := Encode(p, tt.h); err != nil {
				t.Fatal(err)
			}
			got, err := Decode(p)
			if err != nil {
				t.Fatal(err)
			}
			if got.Seq != tt.h.Seq || got.Flow != tt.h.Flow {
				t.Errorf("got %+v want %+v", got, tt.h)
			}
			if tt.hasTime != !got.Sent.IsZero() || (tt.hasTime && !got.Sent.Equal(tt.h.Sent)) {
				t.Errorf("send time %v, want %v (hasTime %v)", got.Sent, tt.h.Sent, tt.hasTime)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, p := range map[string][]byte{
		"empty":     nil,
		"short":     []byte("OVSPRB\x00\x01abc"),
		"bad magic": make([]byte, 64),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(p); !errors.Is(err, ErrNotProbe) {
				t.Errorf("err = %v, want ErrNotProbe", err)
			}
		})
	}
	if err := Encode(make([]byte, MinHeaderLen-1), Header{}); err == nil {
		t.Error("Encode into a too short buffer succeeded")
	}
}

func TestPayloadLen(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.1")
	v6 := netip.MustParseAddr("fd00::1")
	tests := []struct {
		size int
		dst  netip.Addr
		want int // -1 = error
	}{
		{64, v4, 22}, {62, v4, 20}, {61, v4, -1}, {1514, v4, 1472}, {1515, v4, -1},
		{82, v6, 20}, {81, v6, -1}, {1514, v6, 1452},
	}
	for _, tt := range tests {
		got, err := PayloadLen(tt.size, tt.dst)
		if (err != nil) != (tt.want < 0) || (err == nil && got != tt.want) {
			t.Errorf("PayloadLen(%d, %v) = %d, %v; want %d", tt.size, tt.dst, got, err, tt.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	p := make([]byte, HeaderLen)
	_ = Encode(p, Header{Seq: 9, Flow: 1, Sent: time.Unix(1, 2)})
	f.Add(p)
	f.Add([]byte("OVSPRB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		// A decodable payload re-encodes to the same header bytes.
		q := make([]byte, len(b))
		copy(q, b)
		if err := Encode(q, h); err != nil {
			t.Fatal(err)
		}
		n := MinHeaderLen
		if len(b) >= HeaderLen && !h.Sent.IsZero() {
			n = HeaderLen
		}
		if string(q[:n]) != string(b[:n]) {
			t.Fatalf("re-encoded %x, was %x", q[:n], b[:n])
		}
	})
}
