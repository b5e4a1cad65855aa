package bridge

import (
	"bytes"
	"net"
	"testing"
)

// TestV311Packets: the MQTT 5 packets paho writes become MQTT 3.1.1 ones,
// and the upstream's 3.1.1 packets become what paho's MQTT 5 reads.
func TestV311Packets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first byte
		in    []byte
		want  []byte
		up    bool // upstream to paho
	}{
		{"connect", 0x10,
			[]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0xC2, 0, 60, 5, 0x11, 0, 0, 0, 10, 0, 2, 'i', 'd', 0, 1, 'u', 0, 1, 'p'},
			[]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0xC2, 0, 60, 0, 2, 'i', 'd', 0, 1, 'u', 0, 1, 'p'}, false},
		{"connect with will", 0x10,
			[]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x06, 0, 60, 0, 0, 1, 'c', 2, 1, 1, 0, 1, 'w', 0, 1, 'x'},
			[]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x06, 0, 60, 0, 1, 'c', 0, 1, 'w', 0, 1, 'x'}, false},
		{"publish qos 1", 0x32,
			[]byte{0, 1, 't', 0, 7, 3, 0x26, 0, 0, 'p', 'l'},
			[]byte{0, 1, 't', 0, 7, 'p', 'l'}, false},
		{"publish qos 0", 0x30, []byte{0, 1, 't', 0, 'p'}, []byte{0, 1, 't', 'p'}, false},
		{"puback", 0x40, []byte{0, 7, 0x10, 0}, []byte{0, 7}, false},
		{"subscribe", 0x82,
			[]byte{0, 3, 0, 0, 1, 'f', 0x2D},
			[]byte{0, 3, 0, 1, 'f', 0x01}, false},
		{"disconnect", 0xE0, []byte{0, 0}, []byte{}, false},
		{"connack refused", 0x20, []byte{0, 4}, []byte{0, 0x86, 0}, true},
		{"publish down", 0x32, []byte{0, 1, 't', 0, 9, 'p'}, []byte{0, 1, 't', 0, 9, 0, 'p'}, true},
		{"suback", 0x90, []byte{0, 3, 1, 0x80}, []byte{0, 3, 0, 1, 0x80}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := down311
			if tc.up {
				f = up5
			}
			got, err := f(tc.first, tc.in)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got % x, %v; want % x", got, err, tc.want)
			}
		})
	}
	// A connection: paho's bytes may come in pieces.
	var buf bytes.Buffer
	c := &v311Conn{Conn: nopConn{w: &buf}}
	pkt := appendPacket(nil, 0x32, []byte{0, 1, 't', 0, 7, 0, 'p'})
	for _, b := range pkt {
		if _, err := c.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if want := appendPacket(nil, 0x32, []byte{0, 1, 't', 0, 7, 'p'}); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("wrote % x, want % x", buf.Bytes(), want)
	}
}

// nopConn is a net.Conn that only writes, to w.
type nopConn struct {
	net.Conn
	w *bytes.Buffer
}

func (c nopConn) Write(p []byte) (int, error) { return c.w.Write(p) }
