package store

import (
	"bytes"
	"testing"

	"github.com/quiot/quiot/broker"
)

func TestCodecRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    broker.Message
	}{
		{"empty", broker.Message{}},
		{"full", broker.Message{Topic: "a/b", Payload: []byte("hello"), QoS: 1, Retain: true, Time: -5, Origin: "mqtt", Identity: "dev-1"}},
		{"binary payload", broker.Message{Topic: "x", Payload: []byte{0, 1, 2, 0xff}, QoS: 2, Time: 1 << 62}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeMessage(42, encodeMessage(nil, &tt.m))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.m
			want.Seq = 42
			if got.Topic != want.Topic || !bytes.Equal(got.Payload, want.Payload) || got.QoS != want.QoS || got.Retain != want.Retain ||
				got.Time != want.Time || got.Origin != want.Origin || got.Identity != want.Identity || got.Seq != 42 {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

// FuzzDecodeMessage: any bytes decode to a message or an error, never a
// panic, and a decoded message encodes back to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(encodeMessage(nil, &broker.Message{Topic: "a/b", Payload: []byte("p"), QoS: 1, Retain: true, Time: 7, Origin: "h3"}))
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 0, 0, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(1, b)
		if err != nil {
			return
		}
		if again := encodeMessage(nil, m); !bytes.Equal(again, b) {
			// Varints have one canonical form only when minimal; a
			// non-minimal one decodes but encodes shorter.
			if m2, err := decodeMessage(1, again); err != nil || m2.Topic != m.Topic || !bytes.Equal(m2.Payload, m.Payload) {
				t.Fatalf("re-encoding changed the message: %x -> %x", b, again)
			}
		}
	})
}
