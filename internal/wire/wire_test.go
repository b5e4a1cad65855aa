package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"reflect"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		f    Frame
	}{
		{"plain", Frame{Seq: 1, Time: 1700000000123456789, Topic: "a/b", Payload: []byte("hello")}},
		{"empty payload", Frame{Seq: 300, Topic: "x", Payload: []byte{}}},
		{"retained", Frame{Seq: 1 << 40, Time: -1, Topic: "$SYS/x", Payload: []byte{0, 1, 2}, Flags: FlagRetained}},
		{"big", Frame{Seq: 7, Topic: "big", Payload: bytes.Repeat([]byte{0xAB}, 200000)}},
		{"gap", GapFrame(Gap{Topic: "a", From: 3, To: 9})},
	}
	var stream []byte
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendFrame(nil, &tt.f)
			stream = append(stream, b...)
			d := NewDecoder(bytes.NewReader(b), 0)
			got, err := d.Frame()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tt.f, got) {
				t.Fatalf("got %+v, want %+v", got, tt.f)
			}
			if _, err := d.Next(); err != io.EOF {
				t.Fatalf("after last frame: %v, want io.EOF", err)
			}
		})
	}
	d := NewDecoder(bytes.NewReader(stream), 0)
	for i := range tests {
		if _, err := d.Frame(); err != nil {
			t.Fatalf("frame %d of stream: %v", i, err)
		}
	}
}

func TestFrameLayout(t *testing.T) {
	// The exact bytes of the documented layout: the client is coded against it.
	f := Frame{Seq: 5, Time: 1, Topic: "t", Payload: []byte("p"), Flags: FlagRetained}
	want := []byte{14, 5, 0, 0, 0, 0, 0, 0, 0, 1, 1, 't', 1, 'p', 1}
	if got := AppendFrame(nil, &f); !bytes.Equal(got, want) {
		t.Fatalf("AppendFrame = %v, want %v", got, want)
	}
	p := Publish{ID: 2, Flags: PubQoS1 | PubRetain, Time: 1, Topic: "t", Payload: []byte("p")}
	want = []byte{14, 2, 3, 0, 0, 0, 0, 0, 0, 0, 1, 1, 't', 1, 'p'}
	if got := AppendPublish(nil, &p); !bytes.Equal(got, want) {
		t.Fatalf("AppendPublish = %v, want %v", got, want)
	}
	a := Ack{ID: 2, Seq: 9, Status: 413, Reason: "x"}
	want = []byte{6, 2, 9, 0x9d, 0x03, 1, 'x'}
	if got := AppendAck(nil, &a); !bytes.Equal(got, want) {
		t.Fatalf("AppendAck = %v, want %v", got, want)
	}
}

func TestPublishAckRoundTrip(t *testing.T) {
	p := Publish{ID: 99, Flags: PubQoS1, Time: 42, Topic: "s/1", Payload: []byte("v")}
	a := Ack{ID: 99, Seq: 1234, Status: 0}
	e := Ack{ID: 100, Status: 400, Reason: "bad topic"}
	b := AppendPublish(nil, &p)
	b = AppendAck(b, &a)
	b = AppendAck(b, &e)
	d := NewDecoder(bytes.NewReader(b), 0)
	gp, err := d.Publish()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, gp) {
		t.Fatalf("got %+v, want %+v", gp, p)
	}
	for _, want := range []Ack{a, e} {
		got, err := d.Ack()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}

func TestDecoderErrors(t *testing.T) {
	full := AppendFrame(nil, &Frame{Seq: 1, Topic: "a", Payload: []byte("xyz")})
	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"empty stream", nil, 0, io.EOF},
		{"truncated body", full[:len(full)-2], 0, io.ErrUnexpectedEOF},
		{"truncated prefix", []byte{0x80}, 0, io.ErrUnexpectedEOF},
		{"too large", full, 4, ErrTooLarge},
		{"zero length", []byte{0}, 0, ErrMalformed},
		{"overlong varint", bytes.Repeat([]byte{0xff}, 11), 0, ErrMalformed},
		{"short body fields", []byte{2, 1, 0}, 0, ErrMalformed},
		{"topic longer than body", []byte{10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 50}, 0, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDecoder(bytes.NewReader(tt.in), tt.max).Frame()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestTrailingFieldsIgnored(t *testing.T) {
	b := AppendFrame(nil, &Frame{Seq: 1, Topic: "a", Payload: []byte("x")})
	b[0]++
	b = append(b, 0xEE) // a future field
	f, err := NewDecoder(bytes.NewReader(b), 0).Frame()
	if err != nil || f.Topic != "a" {
		t.Fatalf("got %+v, %v", f, err)
	}
}

func TestGapRestarted(t *testing.T) {
	for _, tt := range []struct {
		g    Gap
		want bool
	}{
		{Gap{From: 101}, true},
		{Gap{}, false},
		{Gap{From: 3, To: 9}, false},
		{Gap{Topic: "a", From: 3}, false},
	} {
		if got := tt.g.Restarted(); got != tt.want {
			t.Errorf("%+v.Restarted() = %v", tt.g, got)
		}
	}
}

func TestSSE(t *testing.T) {
	const epoch = 0x00c0ffee12345678
	tests := []struct {
		name  string
		f     Frame
		epoch uint64
		want  string
	}{
		{"message with epoch", Frame{Seq: 7, Time: 12, Topic: "a/b", Payload: []byte("hi")}, epoch,
			"id: 00c0ffee12345678-7\nevent: message\ndata: {\"topic\":\"a/b\",\"seq\":7,\"time\":12,\"text\":\"hi\"}\n\n"},
		{"gap with epoch", GapFrame(Gap{Topic: "a", From: 3, To: 9}), epoch,
			"id: 00c0ffee12345678-9\nevent: gap\ndata: {\"topic\":\"a\",\"from\":3,\"to\":9}\n\n"},
		{"restart gap with epoch", GapFrame(Gap{From: 4}), epoch,
			"id: 00c0ffee12345678-0\nevent: gap\ndata: {\"topic\":\"\",\"from\":4,\"to\":0}\n\n"},
		{"unknown gap with epoch", GapFrame(Gap{}), epoch,
			"event: gap\ndata: {\"topic\":\"\",\"from\":0,\"to\":0}\n\n"},
		{"message", Frame{Seq: 7, Time: 12, Topic: "a/b", Payload: []byte("hi")}, 0,
			"id: 7\nevent: message\ndata: {\"topic\":\"a/b\",\"seq\":7,\"time\":12,\"text\":\"hi\"}\n\n"},
		{"retained empty", Frame{Seq: 1, Topic: "x", Flags: FlagRetained}, 0,
			"id: 1\nevent: message\ndata: {\"topic\":\"x\",\"seq\":1,\"time\":0,\"text\":\"\",\"retained\":true}\n\n"},
		{"replayed multi-line text", Frame{Seq: 3, Topic: "x", Payload: []byte("a\nb\"\x00ü"), Flags: FlagReplayed}, 0,
			"id: 3\nevent: message\ndata: {\"topic\":\"x\",\"seq\":3,\"time\":0,\"text\":\"a\\nb\\\"\\u0000ü\",\"replayed\":true}\n\n"},
		{"binary", Frame{Seq: 4, Topic: "x", Payload: []byte{'a', 0xc3}}, 0,
			"id: 4\nevent: message\ndata: {\"topic\":\"x\",\"seq\":4,\"time\":0,\"payload\":\"YcM=\"}\n\n"},
		{"quoted topic", Frame{Seq: 2, Topic: "a\"b\\c/ü", Payload: []byte{0xff}}, 0,
			"id: 2\nevent: message\ndata: {\"topic\":\"a\\\"b\\\\c/ü\",\"seq\":2,\"time\":0,\"payload\":\"/w==\"}\n\n"},
		{"gap", GapFrame(Gap{Topic: "a", From: 3, To: 9}), 0,
			"id: 9\nevent: gap\ndata: {\"topic\":\"a\",\"from\":3,\"to\":9}\n\n"},
		{"gap unknown", GapFrame(Gap{From: 4}), 0,
			"event: gap\ndata: {\"topic\":\"\",\"from\":4,\"to\":0}\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendSSE(nil, &tt.f, tt.epoch))
			if got != tt.want {
				t.Fatalf("AppendSSE =\n%q\nwant\n%q", got, tt.want)
			}
			ev, err := NewSSEReader(strings.NewReader(":comment\n\n" + got)).Next()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ev.Frame()
			if err != nil {
				t.Fatal(err)
			}
			if len(tt.f.Payload) == 0 {
				back.Payload, tt.f.Payload = nil, nil
			}
			if !reflect.DeepEqual(tt.f, back) {
				t.Fatalf("got %+v, want %+v", back, tt.f)
			}
			if ev.ID != "" {
				e, seq, err := ParseEventID(ev.ID)
				if err != nil || e != tt.epoch || (seq != back.Seq && !back.IsGap()) {
					t.Fatalf("event id %q parses as %x, %d, %v", ev.ID, e, seq, err)
				}
			}
		})
	}
	hb := HeartbeatFrame()
	if got := string(AppendSSE(nil, &hb, epoch)); got != ": keep-alive\n\n" {
		t.Fatalf("heartbeat as SSE = %q, want a comment", got)
	}
	// ?payload=base64: every payload in "payload", as before "text".
	f := Frame{Seq: 7, Time: 12, Topic: "a/b", Payload: []byte("hi"), Flags: FlagRetained}
	want := "id: 7\nevent: message\ndata: {\"topic\":\"a/b\",\"seq\":7,\"time\":12,\"payload\":\"aGk=\",\"retained\":true}\n\n"
	if got := string(AppendSSEBase64(nil, &f, 0)); got != want {
		t.Fatalf("AppendSSEBase64 =\n%q\nwant\n%q", got, want)
	}
}

func TestHeartbeat(t *testing.T) {
	hb := HeartbeatFrame()
	b := AppendFrame(nil, &hb)
	// The documented 13 bytes: length 12, seq 0, time 0, topic "", payload "", flags.
	want := []byte{12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, FlagHeartbeat}
	if !bytes.Equal(b, want) {
		t.Fatalf("heartbeat = %v, want %v", b, want)
	}
	f, err := ParseFrame(b[1:])
	if err != nil || !f.IsHeartbeat() || f.IsGap() || f.Retained() {
		t.Fatalf("ParseFrame(heartbeat) = %+v, %v", f, err)
	}
	// Decoder.Frame skips heartbeats, also ones with stray field values.
	odd := AppendFrame(nil, &Frame{Seq: 9, Topic: "t", Payload: []byte("p"), Flags: FlagHeartbeat | FlagRetained})
	var stream []byte
	stream = append(stream, b...)
	stream = AppendFrame(stream, &Frame{Seq: 1, Topic: "a", Payload: []byte("x")})
	stream = append(stream, odd...)
	stream = append(stream, b...)
	g := GapFrame(Gap{Topic: "a", From: 2, To: 3})
	stream = AppendFrame(stream, &g)
	stream = append(stream, b...)
	d := NewDecoder(bytes.NewReader(stream), 0)
	if f, err := d.Frame(); err != nil || f.Seq != 1 || string(f.Payload) != "x" {
		t.Fatalf("first frame = %+v, %v; want the message", f, err)
	}
	if f, err := d.Frame(); err != nil || !f.IsGap() {
		t.Fatalf("second frame = %+v, %v; want the gap", f, err)
	}
	if _, err := d.Frame(); err != io.EOF {
		t.Fatalf("after trailing heartbeat: %v, want io.EOF", err)
	}
}

func TestEpoch(t *testing.T) {
	for _, e := range []uint64{1, 0xabc, 0x00c0ffee12345678, ^uint64(0)} {
		s := FormatEpoch(e)
		if len(s) != 16 || strings.ToLower(s) != s {
			t.Fatalf("FormatEpoch(%x) = %q, want 16 lowercase hex digits", e, s)
		}
		if got, err := ParseEpoch(s); err != nil || got != e {
			t.Fatalf("ParseEpoch(%q) = %x, %v", s, got, err)
		}
	}
	if got, err := ParseEpoch("ABC"); err != nil || got != 0xabc {
		t.Fatalf("ParseEpoch(ABC) = %x, %v", got, err)
	}
	for _, bad := range []string{"", "0", "0000", "xyz", "0x12", "12345678901234567", "-1", " 1"} {
		if _, err := ParseEpoch(bad); !errors.Is(err, ErrBadEpoch) {
			t.Errorf("ParseEpoch(%q) = %v, want ErrBadEpoch", bad, err)
		}
	}
}

func TestEventID(t *testing.T) {
	tests := []struct {
		in         string
		epoch, seq uint64
		err        error
	}{
		{"42", 0, 42, nil},
		{" 42 ", 0, 42, nil},
		{"0", 0, 0, nil},
		{"00c0ffee12345678-7", 0x00c0ffee12345678, 7, nil},
		{"C0FFEE-0", 0xc0ffee, 0, nil},
		{"18446744073709551615", 0, ^uint64(0), nil},
		{"", 0, 0, ErrBadEventID},
		{"x", 0, 0, ErrBadEventID},
		{"+5", 0, 0, ErrBadEventID},
		{"-5", 0, 0, ErrBadEpoch},
		{"0-5", 0, 0, ErrBadEpoch},
		{"abc-", 0, 0, ErrBadEventID},
		{"abc-1-2", 0, 0, ErrBadEventID},
		{"abc-x", 0, 0, ErrBadEventID},
		{"g-1", 0, 0, ErrBadEpoch},
		{"18446744073709551616", 0, 0, ErrBadEventID},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, seq, err := ParseEventID(tt.in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("ParseEventID(%q) = %x, %d, %v; want %v", tt.in, e, seq, err, tt.err)
				}
				return
			}
			if err != nil || e != tt.epoch || seq != tt.seq {
				t.Fatalf("ParseEventID(%q) = %x, %d, %v; want %x, %d", tt.in, e, seq, err, tt.epoch, tt.seq)
			}
			if back := string(AppendEventID(nil, e, seq)); back != strings.TrimSpace(tt.in) && e == 0 {
				t.Fatalf("AppendEventID = %q, want %q", back, tt.in)
			}
		})
	}
}

// FuzzParseEventID: no panic, and whatever parses formats back to an id
// that parses the same.
func FuzzParseEventID(f *testing.F) {
	f.Add("42")
	f.Add("00c0ffee12345678-7")
	f.Add("-")
	f.Fuzz(func(t *testing.T, in string) {
		e, seq, err := ParseEventID(in)
		if err != nil {
			if !errors.Is(err, ErrBadEventID) && !errors.Is(err, ErrBadEpoch) {
				t.Fatalf("ParseEventID(%q) error %v wraps neither sentinel", in, err)
			}
			return
		}
		e2, seq2, err := ParseEventID(string(AppendEventID(nil, e, seq)))
		if err != nil || e2 != e || seq2 != seq {
			t.Fatalf("round trip of %q: %x %d vs %x %d (%v)", in, e, seq, e2, seq2, err)
		}
	})
}

// FuzzDecode feeds arbitrary bytes to the decoders: no panic, no frame above
// the limit, and every frame that parses re-encodes to a frame that parses
// the same.
func FuzzDecode(f *testing.F) {
	f.Add(AppendFrame(nil, &Frame{Seq: 1, Time: 2, Topic: "a/b", Payload: []byte("x"), Flags: FlagRetained}))
	f.Add(AppendPublish(nil, &Publish{ID: 1, Flags: PubQoS1, Topic: "t", Payload: []byte("p")}))
	f.Add(AppendAck(nil, &Ack{ID: 1, Seq: 2, Status: 400, Reason: "r"}))
	f.Add([]byte{0x80, 0x80, 0x80})
	hb := HeartbeatFrame()
	f.Add(AppendFrame(nil, &hb))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewDecoder(bytes.NewReader(in), 1024)
		for {
			body, err := d.Next()
			if err != nil {
				return
			}
			if len(body) > 1024 {
				t.Fatalf("body of %d bytes above limit", len(body))
			}
			if fr, err := ParseFrame(body); err == nil {
				fr2, err := ParseFrame(mustBody(t, AppendFrame(nil, &fr)))
				if err != nil || !reflect.DeepEqual(fr, fr2) {
					t.Fatalf("frame re-encode: %+v vs %+v (%v)", fr, fr2, err)
				}
				_ = AppendSSE(nil, &fr, 0)
				_ = AppendSSE(nil, &fr, 1)
			}
			if p, err := ParsePublish(body); err == nil {
				p2, err := ParsePublish(mustBody(t, AppendPublish(nil, &p)))
				if err != nil || !reflect.DeepEqual(p, p2) {
					t.Fatalf("publish re-encode: %+v vs %+v (%v)", p, p2, err)
				}
			}
			if a, err := ParseAck(body); err == nil {
				a2, err := ParseAck(mustBody(t, AppendAck(nil, &a)))
				if err != nil || a != a2 {
					t.Fatalf("ack re-encode: %+v vs %+v (%v)", a, a2, err)
				}
			}
		}
	})
}

func mustBody(t *testing.T, b []byte) []byte {
	t.Helper()
	body, err := NewDecoder(bytes.NewReader(b), 1<<20).Next()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func TestMQTTConnackReason(t *testing.T) {
	for code, want := range map[byte]string{0x86: "bad user name or password", 0x87: "not authorized", 0x8A: "banned", 0x80: "refused"} {
		if got := MQTTConnackReason(code); got != want {
			t.Errorf("MQTTConnackReason(0x%02x) = %q, want %q", code, got, want)
		}
	}
}
