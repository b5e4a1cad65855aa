package client

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestDeliveryVerdict(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want verdict
	}{
		{"503 shutting down", &StatusError{Code: 503}, verdictRetry},
		{"429", &StatusError{Code: 429}, verdictRetry},
		{"400 bad topic", &StatusError{Code: 400}, verdictDrop},
		{"413 too large", &StatusError{Code: 413}, verdictDrop},
		{"401", &StatusError{Code: 401}, verdictFatal},
		{"403", fmt.Errorf("publish: %w", &StatusError{Code: 403}), verdictFatal},
		{"mqtt not authorized", &mqttRefusal{code: 0x87, err: ErrMQTTRefused}, verdictFatal},
		{"mqtt topic invalid", &mqttRefusal{code: 0x90, err: ErrMQTTRefused}, verdictDrop},
		{"mqtt quota", &mqttRefusal{code: 0x97, err: ErrMQTTRefused}, verdictDrop},
		{"mqtt implementation specific", &mqttRefusal{code: 0x83, err: ErrMQTTRefused}, verdictRetry},
		{"mqtt connack refusal", fmt.Errorf("%w: connect: bad user name or password", ErrMQTTRefused), verdictFatal},
		{"network", errors.New("timeout: no recent network activity"), verdictRetry},
		{"closed", ErrClosed, verdictFatal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deliveryVerdict(tt.err); got != tt.want {
				t.Fatalf("verdict %d, want %d", got, tt.want)
			}
		})
	}
}

func TestDeduper(t *testing.T) {
	at := time.Unix(0, 1_700_000_000_000_000_001)
	tests := []struct {
		name string
		m    Message
		dup  bool
	}{
		{"first", Message{Topic: "a", Seq: 1, Sent: at, Payload: []byte("x")}, false},
		{"publisher resend: new seq, same send time and payload", Message{Topic: "a", Seq: 2, Sent: at, Payload: []byte("x")}, true},
		{"same time, other topic", Message{Topic: "b", Seq: 3, Sent: at, Payload: []byte("x")}, false},
		{"same time, other payload (another publisher)", Message{Topic: "a", Seq: 4, Sent: at, Payload: []byte("y")}, false},
		{"no send time, by seq", Message{Topic: "c", Seq: 9, Payload: []byte("z")}, false},
		{"broker redelivery, same seq", Message{Topic: "c", Seq: 9, Payload: []byte("z")}, true},
		{"neither time nor seq", Message{Topic: "d", Payload: []byte("q")}, false},
		{"neither again", Message{Topic: "d", Payload: []byte("q")}, false},
		{"gap", Message{Topic: "a", Seq: 2, Sent: at, Gap: true}, false},
	}
	var d Deduper
	for _, tt := range tests {
		if got := d.Duplicate(&tt.m); got != tt.dup {
			t.Fatalf("%s: duplicate = %v, want %v", tt.name, got, tt.dup)
		}
	}
	// The window forgets the oldest.
	d = Deduper{Window: 2}
	m := func(i int) *Message {
		return &Message{Topic: "w", Sent: at.Add(time.Duration(i)), Payload: []byte("p")}
	}
	for i := range 3 {
		d.Duplicate(m(i))
	}
	if d.Duplicate(m(0)) {
		t.Fatal("message 0 still remembered with window 2")
	}
	if !d.Duplicate(m(2)) {
		t.Fatal("message 2 forgotten")
	}
}
