package spool

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestParseRecordErrors(t *testing.T) {
	good := appendMessage(nil, &Message{ID: 1, Time: 2, Topic: "a", Payload: []byte("p"), QoS: 1})
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errShort},
		{"short header", good[:5], errShort},
		{"short body", good[:len(good)-1], errShort},
		{"zero length", make([]byte, 16), errCorrupt},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, errCorrupt},
		{"bad crc", func() []byte { b := bytes.Clone(good); b[4] ^= 1; return b }(), errCorrupt},
		{"unknown kind", sealRecord(append(make([]byte, headerSize), 9), 0), errCorrupt},
		{"short ack", sealRecord(append(make([]byte, headerSize), kindAck, 1), 0), errCorrupt},
		{"qos 3", sealRecord(append(make([]byte, headerSize), kindMessage, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0), 0), errCorrupt},
		{"message id 0", sealRecord(append(make([]byte, headerSize), kindMessage, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0), errCorrupt},
		{"ack id out of range", sealRecord(append(make([]byte, headerSize), kindAck, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 0), errCorrupt},
		{"topic past end", sealRecord(append(make([]byte, headerSize), kindMessage, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 9, 'a'), 0), errCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := parseRecord(tt.b); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	r, n, err := parseRecord(append(bytes.Clone(good), 1, 2, 3))
	if err != nil || n != len(good) || r.msg.Topic != "a" || string(r.msg.Payload) != "p" || r.msg.QoS != 1 {
		t.Fatalf("good record: %+v %d %v", r, n, err)
	}
}

// FuzzParseRecord: any bytes give a record, errShort or errCorrupt, never
// a panic; a record that parses encodes back to the same bytes.
func FuzzParseRecord(f *testing.F) {
	f.Add(appendMessage(nil, &Message{ID: 1, Time: 2, Topic: "a/b", Payload: []byte("hello"), QoS: 1, Retain: true}))
	f.Add(appendAck(nil, 42))
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := parseRecord(b)
		if err != nil {
			if !errors.Is(err, errShort) && !errors.Is(err, errCorrupt) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if n < headerSize+9 || n > len(b) {
			t.Fatalf("size %d of %d bytes", n, len(b))
		}
		var again []byte
		switch r.kind {
		case kindAck:
			again = appendAck(nil, r.ack)
		case kindMessage:
			again = appendMessage(nil, &r.msg)
		}
		if !bytes.Equal(again, b[:n]) {
			// Only a non-minimal topic-length varint may differ.
			if r2, _, err := parseRecord(again); err != nil || r2.kind != r.kind || r2.msg.Topic != r.msg.Topic || !bytes.Equal(r2.msg.Payload, r.msg.Payload) {
				t.Fatalf("re-encoding differs: %x vs %x", again, b[:n])
			}
		}
	})
}

// FuzzOpen: whatever a damaged segment holds, Open either refuses it with
// an error or recovers; it never panics, and what it recovers is in order.
func FuzzOpen(f *testing.F) {
	var seg []byte
	seg = append(seg, segMagic...)
	seg = appendAck(seg, 0)
	seg = appendMessage(seg, &Message{ID: 1, Time: 10, Topic: "a", Payload: []byte("x")})
	seg = appendMessage(seg, &Message{ID: 2, Time: 11, Topic: "a", Payload: []byte("y")})
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Add([]byte(segMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := writeFile(dir+"/"+segName(1), b); err != nil {
			t.Fatal(err)
		}
		s, err := Open(Options{Dir: dir, MaxAge: -1, Logger: discard()})
		if err != nil {
			return
		}
		defer s.Close()
		var last uint64
		for s.Pending() > 0 {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			m, err := s.Next(ctx)
			cancel()
			if err != nil {
				t.Fatalf("next with %d pending: %v", s.Pending(), err)
			}
			if m.ID <= last {
				t.Fatalf("id %d after %d", m.ID, last)
			}
			last = m.ID
			s.Ack(m.ID)
		}
	})
}
