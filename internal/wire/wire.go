// Package wire is the binary framing of quiot's HTTP/3 pub-sub protocol, v1,
// its Server-Sent Events rendering, and the names of its HTTP exchanges:
// paths, header names, query parameters and the encoding of a topic in a
// request path (http.go), which the broker and the client both use.
//
// # Framing
//
// Every frame on a stream of content type application/vnd.quiot.frames is
//
//	length  uvarint   number of bytes of body that follow (1 .. max frame size)
//	body    length bytes
//
// "uvarint" is the unsigned LEB128 varint of Go's encoding/binary
// (binary.AppendUvarint / binary.ReadUvarint: 7 bits per byte, least
// significant group first, high bit set on every byte but the last). "i64" is
// an 8-byte big-endian two's-complement integer. "str" is a uvarint byte count
// followed by that many bytes. Decoders ignore bytes left in a body after the
// fields they know (room for later versions) and reject bodies that end early.
//
// # Message frame (broker -> subscriber, GET /v1/topics/{filter})
//
//	seq      uvarint  broker sequence number of the message
//	time     i64      publisher send time, Unix ns; 0 = unknown
//	topic    str      topic name (UTF-8)
//	payload  str      payload bytes
//	flags    1 byte   FlagRetained 0x01, FlagGap 0x02, FlagHeartbeat 0x04,
//	                  FlagReplayed 0x08; other bits reserved (0)
//
// Sequence numbers come from one broker-wide counter, assigned in acceptance
// order: they increase strictly within every topic, and a single number is a
// resume point for any filter (GET ...?since=SEQ or Last-Event-ID: SEQ). They
// restart from 1 when the broker restarts (history is in memory).
//
// # Epoch
//
// So that a resume point from before a restart is never mistaken for one of
// the restarted broker, each broker run picks a random, non-zero 64-bit
// epoch when it starts (random, not a clock: a Raspberry Pi has no RTC). The
// broker sends it on every subscribe response in the header Quiot-Epoch, as
// 16 lowercase hex digits (FormatEpoch). A client resuming sends it back:
//
//	GET /v1/topics/{filter}?since=SEQ&epoch=EPOCH
//
// or, where only one value travels (an EventSource's Last-Event-ID), as the
// event id EPOCH-SEQ (see Server-Sent Events below; ParseEventID reads both
// forms, a plain SEQ meaning "epoch unknown"). When the epoch a client sends
// is not the broker's own, the broker announces the restart gap (below) and
// replays all the history it has, whatever SEQ is. Without an epoch the
// broker can only tell a restart when SEQ is beyond its last sequence number.
//
// A message with FlagRetained is the retained message of its topic, sent when
// the subscription starts (before live messages). A message with
// FlagReplayed comes from the broker's history, sent when a subscription
// with a resume point starts (before live messages); live messages have
// neither flag. Decoders that predate FlagReplayed ignore it.
//
// A frame with FlagGap carries no message: it announces that messages were
// lost for this subscriber, either because the broker's bounded history no
// longer held them on resume, or because the subscriber's queue overflowed
// (drop-oldest policy). Its fields mean:
//
//	seq      last lost sequence number (inclusive); 0 = unknown
//	time     0
//	topic    topic whose messages were lost; "" = unknown / several topics
//	payload  uvarint: first lost sequence number (inclusive); 0 = unknown
//
// A subscriber tracking a resume point moves it to max(resume, seq).
//
// One gap is special: topic "", seq (to) 0 and a first lost number > 0
// answers a resume point from another broker run (an epoch that is not the
// broker's, or a resume point beyond its last sequence number): the broker
// restarted and its numbering began again. Its first lost number is the
// resume point + 1. Gap.Restarted reports it; the subscriber must forget its
// resume point (the broker goes on to replay all the history it has, with
// small sequence numbers) and take the epoch of the response as its own.
//
// # Heartbeat frame (broker -> subscriber)
//
// A frame with FlagHeartbeat carries nothing: the broker sends it on a
// subscription that has been silent for a while (15 s by default), so that
// the QUIC idle timeout, NAT bindings and proxies do not end a quiet
// subscription when the connection has no QUIC keep-alive. Its fields are
// seq 0, time 0, topic "", payload "" (13 bytes with the prefix). Decoders
// skip it whatever the values of its other fields (Decoder.Frame never
// returns one); it is not a message. The broker sends heartbeat frames only to a subscriber whose
// request has the header "Quiot-Heartbeat: 1" (a decoder that predates them
// would take one for an empty message); it then answers with
// "Quiot-Heartbeat: <interval in ms>".
//
// # Publish frame (publisher -> broker, body of POST /v1/publish)
//
//	id       uvarint  publisher's frame id, echoed in the ack (e.g. 1, 2, 3...)
//	flags    1 byte   PubQoS1 0x01, PubRetain 0x02; other bits reserved (0)
//	time     i64      publisher send time, Unix ns; 0 = unknown
//	topic    str      topic name
//	payload  str      payload; an empty payload with PubRetain clears the
//	                  topic's retained message
//
// # Ack frame (broker -> publisher, response body of POST /v1/publish)
//
//	id       uvarint  id of the publish frame acknowledged
//	seq      uvarint  sequence number the broker assigned; 0 if rejected
//	status   uvarint  0 = accepted; otherwise the HTTP status a single
//	                  POST /v1/topics/{topic} would have got (400, 403, 413,
//	                  429, 503)
//	reason   str      one-line reason when status != 0, else empty
//
// The broker acks every QoS 1 frame once the message is accepted, and every
// rejected frame (any QoS), in the order the frames arrived. QoS 0 frames that
// are accepted are not acked. A malformed or oversized frame ends the stream
// (the broker resets it; no ack).
//
// # Server-Sent Events (Accept: text/event-stream)
//
// A message is
//
//	id: <epoch>-<seq>
//	event: message
//	data: {"topic":"a/b","seq":7,"time":1700000000000000000,"text":"hi","retained":true}
//
// The payload is in "text", a JSON string, when it is valid UTF-8 (the empty
// payload included), and otherwise in "payload", standard base64 with
// padding: exactly one of the two is present, and "payload" is always
// base64. A subscription with the query parameter payload=base64 gets every
// payload in "payload" (the data of brokers before "text"). "retained" and
// "replayed" (see the flags) are present only when true; time 0 = unknown.
// A gap is
//
//	id: <epoch>-<last lost seq>, omitted when that is 0
//	event: gap
//	data: {"topic":"a/b","from":3,"to":9}
//
// each followed by an empty line. The id carries the broker's epoch (16 hex
// digits) so that an EventSource, which resends the last id it saw as
// Last-Event-ID when it reconnects, resumes across a broker restart without
// silent loss; the restart gap has the id <epoch>-0 (resume from the start
// of this broker run). The sequence number alone is the data's "seq". A
// broker with no epoch (AppendSSE with epoch 0) writes plain <seq> ids, and
// the broker accepts plain numeric ids in Last-Event-ID as before.
// Comment lines (": keep-alive") are the heartbeats of an SSE stream.
package wire

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ContentType is the media type of a frame stream.
const ContentType = "application/vnd.quiot.frames"

// DefaultMaxFrame is the default largest frame body a decoder accepts: the
// default payload limit (256 KiB) plus room for the other fields.
const DefaultMaxFrame = 256<<10 + 1024

// Message frame flags.
const (
	FlagRetained  byte = 0x01
	FlagGap       byte = 0x02
	FlagHeartbeat byte = 0x04
	FlagReplayed  byte = 0x08
)

// Publish frame flags.
const (
	PubQoS1   byte = 0x01
	PubRetain byte = 0x02
)

// Errors returned by decoders (wrapped with context).
var (
	// ErrTooLarge means a frame's length prefix exceeds the decoder's maximum.
	ErrTooLarge = errors.New("frame too large")
	// ErrMalformed means a frame body is truncated or a field is invalid.
	ErrMalformed = errors.New("malformed frame")
)

// Frame is a message frame, or a gap announcement when Flags has FlagGap.
type Frame struct {
	Seq     uint64
	Time    int64
	Topic   string
	Payload []byte
	Flags   byte
}

// Retained reports whether the frame carries a retained message.
func (f *Frame) Retained() bool { return f.Flags&FlagRetained != 0 }

// Replayed reports whether the frame carries a message replayed from the
// broker's history (a subscription with a resume point), not a live one.
func (f *Frame) Replayed() bool { return f.Flags&FlagReplayed != 0 }

// IsGap reports whether the frame announces a gap.
func (f *Frame) IsGap() bool { return f.Flags&FlagGap != 0 }

// IsHeartbeat reports whether the frame is a heartbeat (no message).
func (f *Frame) IsHeartbeat() bool { return f.Flags&FlagHeartbeat != 0 }

// HeartbeatFrame returns a heartbeat frame.
func HeartbeatFrame() Frame { return Frame{Flags: FlagHeartbeat} }

// Gap is the content of a gap frame: messages From..To (inclusive) of Topic
// were lost. Zero values mean unknown.
type Gap struct {
	Topic    string
	From, To uint64
}

// Restarted reports whether g announces a broker restart (see the package
// documentation): sequence numbers began again.
func (g Gap) Restarted() bool { return g.Topic == "" && g.To == 0 && g.From > 0 }

// GapFrame returns the frame announcing g.
func GapFrame(g Gap) Frame {
	return Frame{Seq: g.To, Topic: g.Topic, Payload: binary.AppendUvarint(nil, g.From), Flags: FlagGap}
}

// Gap returns the gap a gap frame announces.
func (f *Frame) Gap() (Gap, error) {
	if !f.IsGap() {
		return Gap{}, fmt.Errorf("%w: not a gap frame", ErrMalformed)
	}
	from, n := binary.Uvarint(f.Payload)
	if n <= 0 {
		return Gap{}, fmt.Errorf("%w: gap payload", ErrMalformed)
	}
	return Gap{Topic: f.Topic, From: from, To: f.Seq}, nil
}

// Publish is a publish frame.
type Publish struct {
	ID      uint64
	Flags   byte
	Time    int64
	Topic   string
	Payload []byte
}

// Ack is an ack frame. Status 0 means accepted.
type Ack struct {
	ID     uint64
	Seq    uint64
	Status uint64
	Reason string
}

// appendFrame prefixes body (written by fn after reserving room) with its length.
func appendPrefixed(dst []byte, bodyLen int, body func([]byte) []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(bodyLen))
	return body(dst)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func strLen(n int) int { return uvarintLen(uint64(n)) + n }

func appendI64(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendFrame appends f, length prefix included, to dst.
func AppendFrame(dst []byte, f *Frame) []byte {
	n := uvarintLen(f.Seq) + 8 + strLen(len(f.Topic)) + strLen(len(f.Payload)) + 1
	return appendPrefixed(dst, n, func(b []byte) []byte {
		b = binary.AppendUvarint(b, f.Seq)
		b = appendI64(b, f.Time)
		b = appendStr(b, f.Topic)
		b = appendBytes(b, f.Payload)
		return append(b, f.Flags)
	})
}

// AppendPublish appends p, length prefix included, to dst.
func AppendPublish(dst []byte, p *Publish) []byte {
	n := uvarintLen(p.ID) + 1 + 8 + strLen(len(p.Topic)) + strLen(len(p.Payload))
	return appendPrefixed(dst, n, func(b []byte) []byte {
		b = binary.AppendUvarint(b, p.ID)
		b = append(b, p.Flags)
		b = appendI64(b, p.Time)
		b = appendStr(b, p.Topic)
		return appendBytes(b, p.Payload)
	})
}

// AppendAck appends a, length prefix included, to dst.
func AppendAck(dst []byte, a *Ack) []byte {
	n := uvarintLen(a.ID) + uvarintLen(a.Seq) + uvarintLen(a.Status) + strLen(len(a.Reason))
	return appendPrefixed(dst, n, func(b []byte) []byte {
		b = binary.AppendUvarint(b, a.ID)
		b = binary.AppendUvarint(b, a.Seq)
		b = binary.AppendUvarint(b, a.Status)
		return appendStr(b, a.Reason)
	})
}

// parser reads fields from a body.
type parser struct {
	b   []byte
	err error
}

func (p *parser) fail(field string) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: truncated or invalid %s", ErrMalformed, field)
	}
}

func (p *parser) uvarint(field string) uint64 {
	if p.err != nil {
		return 0
	}
	v, n := binary.Uvarint(p.b)
	if n <= 0 {
		p.fail(field)
		return 0
	}
	p.b = p.b[n:]
	return v
}

func (p *parser) byte1(field string) byte {
	if p.err != nil {
		return 0
	}
	if len(p.b) < 1 {
		p.fail(field)
		return 0
	}
	v := p.b[0]
	p.b = p.b[1:]
	return v
}

func (p *parser) i64(field string) int64 {
	if p.err != nil {
		return 0
	}
	if len(p.b) < 8 {
		p.fail(field)
		return 0
	}
	v := int64(binary.BigEndian.Uint64(p.b))
	p.b = p.b[8:]
	return v
}

func (p *parser) bytes(field string) []byte {
	n := p.uvarint(field + " length")
	if p.err != nil {
		return nil
	}
	if n > uint64(len(p.b)) {
		p.fail(field)
		return nil
	}
	v := p.b[:n:n]
	p.b = p.b[n:]
	return v
}

// ParseFrame decodes a message frame body (without the length prefix). The
// result's Payload aliases body.
func ParseFrame(body []byte) (Frame, error) {
	p := parser{b: body}
	var f Frame
	f.Seq = p.uvarint("seq")
	f.Time = p.i64("time")
	f.Topic = string(p.bytes("topic"))
	f.Payload = p.bytes("payload")
	f.Flags = p.byte1("flags")
	return f, p.err
}

// ParsePublish decodes a publish frame body. The result's Payload aliases body.
func ParsePublish(body []byte) (Publish, error) {
	p := parser{b: body}
	var v Publish
	v.ID = p.uvarint("id")
	v.Flags = p.byte1("flags")
	v.Time = p.i64("time")
	v.Topic = string(p.bytes("topic"))
	v.Payload = p.bytes("payload")
	return v, p.err
}

// ParseAck decodes an ack frame body.
func ParseAck(body []byte) (Ack, error) {
	p := parser{b: body}
	var a Ack
	a.ID = p.uvarint("id")
	a.Seq = p.uvarint("seq")
	a.Status = p.uvarint("status")
	a.Reason = string(p.bytes("reason"))
	return a, p.err
}

// Decoder reads length-prefixed frames from a stream.
type Decoder struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewDecoder returns a decoder reading from r that rejects frame bodies
// larger than maxFrame bytes; maxFrame <= 0 means DefaultMaxFrame.
func NewDecoder(r io.Reader, maxFrame int) *Decoder {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 16<<10)
	}
	return &Decoder{r: br, max: maxFrame}
}

// Buffered reports how many bytes are already read from the stream and not
// yet decoded: a writer may delay flushing while more frames are at hand.
func (d *Decoder) Buffered() int { return d.r.Buffered() }

// Next returns the next frame body. It returns io.EOF at a clean end of the
// stream (between frames), io.ErrUnexpectedEOF inside a frame, and an error
// wrapping ErrTooLarge or ErrMalformed for a bad length. The body is valid
// until the next call.
func (d *Decoder) Next() ([]byte, error) {
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: length prefix: %v", ErrMalformed, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if n > uint64(d.max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, d.max)
	}
	if cap(d.buf) < int(n) {
		d.buf = make([]byte, n)
	}
	d.buf = d.buf[:n]
	if _, err := io.ReadFull(d.r, d.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return d.buf, nil
}

// Frame reads the next message or gap frame, skipping heartbeat frames; its
// Payload is a fresh copy.
func (d *Decoder) Frame() (Frame, error) {
	for {
		b, err := d.Next()
		if err != nil {
			return Frame{}, err
		}
		f, err := ParseFrame(b)
		if err == nil && f.IsHeartbeat() {
			continue
		}
		f.Payload = clone(f.Payload)
		return f, err
	}
}

// Publish reads the next publish frame; its Payload is a fresh copy.
func (d *Decoder) Publish() (Publish, error) {
	b, err := d.Next()
	if err != nil {
		return Publish{}, err
	}
	p, err := ParsePublish(b)
	p.Payload = clone(p.Payload)
	return p, err
}

// Ack reads the next ack frame.
func (d *Decoder) Ack() (Ack, error) {
	b, err := d.Next()
	if err != nil {
		return Ack{}, err
	}
	return ParseAck(b)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// SSEData is the JSON object in the data line of an SSE "message" event.
// Exactly one of Text and Payload is present in what a broker sends.
type SSEData struct {
	Topic    string  `json:"topic"`
	Seq      uint64  `json:"seq"`
	Time     int64   `json:"time"`
	Text     *string `json:"text,omitempty"`    // a payload that is valid UTF-8
	Payload  []byte  `json:"payload,omitempty"` // any other payload, base64 in JSON
	Retained bool    `json:"retained,omitempty"`
	Replayed bool    `json:"replayed,omitempty"`
}

// SSEGap is the JSON object in the data line of an SSE "gap" event.
type SSEGap struct {
	Topic string `json:"topic"`
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
}

// AppendSSE appends f as one Server-Sent Event (a message or a gap event)
// of a broker with the given epoch; epoch 0 (none) writes plain numeric ids.
// A payload that is valid UTF-8 goes in "text" as a JSON string, any other
// in "payload" as base64. A heartbeat frame is written as a comment line.
func AppendSSE(dst []byte, f *Frame, epoch uint64) []byte {
	return appendSSE(dst, f, epoch, true)
}

// AppendSSEBase64 is AppendSSE with every payload in "payload" as base64,
// text or not: the data of brokers before "text" existed, for a consumer
// that asked for it (GET ...?payload=base64).
func AppendSSEBase64(dst []byte, f *Frame, epoch uint64) []byte {
	return appendSSE(dst, f, epoch, false)
}

func appendSSE(dst []byte, f *Frame, epoch uint64, text bool) []byte {
	if f.IsHeartbeat() {
		return append(dst, ": keep-alive\n\n"...)
	}
	if f.IsGap() {
		g, _ := f.Gap()
		switch {
		case g.To != 0:
			dst = append(dst, "id: "...)
			dst = AppendEventID(dst, epoch, g.To)
			dst = append(dst, '\n')
		case g.Restarted() && epoch != 0:
			dst = append(dst, "id: "...)
			dst = AppendEventID(dst, epoch, 0)
			dst = append(dst, '\n')
		}
		dst = append(dst, "event: gap\ndata: {\"topic\":"...)
		dst = appendJSONString(dst, g.Topic)
		dst = append(dst, ",\"from\":"...)
		dst = strconv.AppendUint(dst, g.From, 10)
		dst = append(dst, ",\"to\":"...)
		dst = strconv.AppendUint(dst, g.To, 10)
		return append(dst, "}\n\n"...)
	}
	dst = append(dst, "id: "...)
	dst = AppendEventID(dst, epoch, f.Seq)
	dst = append(dst, "\nevent: message\ndata: {\"topic\":"...)
	dst = appendJSONString(dst, f.Topic)
	dst = append(dst, ",\"seq\":"...)
	dst = strconv.AppendUint(dst, f.Seq, 10)
	dst = append(dst, ",\"time\":"...)
	dst = strconv.AppendInt(dst, f.Time, 10)
	if text && utf8.Valid(f.Payload) {
		dst = append(dst, ",\"text\":"...)
		dst = appendJSONString(dst, string(f.Payload))
	} else {
		dst = append(dst, ",\"payload\":\""...)
		dst = base64.StdEncoding.AppendEncode(dst, f.Payload)
		dst = append(dst, '"')
	}
	if f.Retained() {
		dst = append(dst, ",\"retained\":true"...)
	}
	if f.Replayed() {
		dst = append(dst, ",\"replayed\":true"...)
	}
	return append(dst, "}\n\n"...)
}

// Errors of ParseEpoch and ParseEventID.
var (
	// ErrBadEpoch means an epoch does not parse.
	ErrBadEpoch = errors.New("bad epoch")
	// ErrBadEventID means a resume point (SEQ or EPOCH-SEQ) does not parse.
	ErrBadEventID = errors.New("bad event id")
)

// FormatEpoch returns the text form of an epoch: 16 lowercase hex digits.
func FormatEpoch(e uint64) string {
	return string(appendEpoch(make([]byte, 0, 16), e))
}

func appendEpoch(dst []byte, e uint64) []byte {
	const hex = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hex[(e>>uint(shift))&0xf])
	}
	return dst
}

// ParseEpoch reads an epoch: 1 to 16 hex digits (either case), not zero.
func ParseEpoch(s string) (uint64, error) {
	if len(s) == 0 || len(s) > 16 {
		return 0, fmt.Errorf("%w %q: want 1 to 16 hex digits", ErrBadEpoch, s)
	}
	e, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: want hex digits", ErrBadEpoch, s)
	}
	if e == 0 {
		return 0, fmt.Errorf("%w %q: zero is no epoch", ErrBadEpoch, s)
	}
	return e, nil
}

// AppendEventID appends the SSE event id of seq in epoch: EPOCH-SEQ, or the
// plain SEQ when epoch is 0.
func AppendEventID(dst []byte, epoch, seq uint64) []byte {
	if epoch != 0 {
		dst = appendEpoch(dst, epoch)
		dst = append(dst, '-')
	}
	return strconv.AppendUint(dst, seq, 10)
}

// ParseEventID reads a resume point as a client sends it in ?since= or
// Last-Event-ID: "SEQ" (epoch 0: unknown) or "EPOCH-SEQ". Surrounding
// spaces are ignored.
func ParseEventID(s string) (epoch, seq uint64, err error) {
	s = strings.TrimSpace(s)
	if es, ss, ok := strings.Cut(s, "-"); ok {
		if epoch, err = ParseEpoch(es); err != nil {
			return 0, 0, fmt.Errorf("%w: %w", ErrBadEventID, err)
		}
		s = ss
	}
	seq, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: sequence number %q: want a decimal number", ErrBadEventID, s)
	}
	return epoch, seq, nil
}

// appendJSONString appends s as a JSON string. Topics are valid UTF-8
// without NUL, but may hold quotes, backslashes and control characters.
func appendJSONString(dst []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// SSEEvent is one Server-Sent Event as read from a stream.
type SSEEvent struct {
	ID    string
	Event string
	Data  string
}

// SSEReader reads Server-Sent Events (the subset the broker sends, plus
// comments and multi-line data as the SSE specification defines them).
type SSEReader struct {
	r *bufio.Reader
}

// NewSSEReader returns a reader of events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 16<<10)}
}

// Next returns the next event; io.EOF at the end of the stream.
func (s *SSEReader) Next() (SSEEvent, error) {
	var ev SSEEvent
	var data []byte
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" {
				if seen {
					return ev, io.ErrUnexpectedEOF
				}
				return ev, io.EOF
			}
			if err != io.EOF {
				return ev, err
			}
		}
		line = trimEOL(line)
		if line == "" {
			if !seen {
				continue
			}
			ev.Data = string(data)
			if ev.Event == "" {
				ev.Event = "message"
			}
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, ""
		for i := 0; i < len(line); i++ {
			if line[i] == ':' {
				field, value = line[:i], line[i+1:]
				if len(value) > 0 && value[0] == ' ' {
					value = value[1:]
				}
				break
			}
		}
		seen = true
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Event = value
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
}

func trimEOL(s string) string {
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	if n := len(s); n > 0 && s[n-1] == '\r' {
		s = s[:n-1]
	}
	return s
}

// Frame converts a "message" or "gap" event into the equivalent frame.
func (e *SSEEvent) Frame() (Frame, error) {
	switch e.Event {
	case "message":
		var d SSEData
		if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
			return Frame{}, fmt.Errorf("%w: sse message data: %v", ErrMalformed, err)
		}
		f := Frame{Seq: d.Seq, Time: d.Time, Topic: d.Topic, Payload: d.Payload}
		if d.Text != nil {
			f.Payload = []byte(*d.Text)
		}
		if d.Retained {
			f.Flags |= FlagRetained
		}
		if d.Replayed {
			f.Flags |= FlagReplayed
		}
		return f, nil
	case "gap":
		var g SSEGap
		if err := json.Unmarshal([]byte(e.Data), &g); err != nil {
			return Frame{}, fmt.Errorf("%w: sse gap data: %v", ErrMalformed, err)
		}
		return GapFrame(Gap(g)), nil
	default:
		return Frame{}, fmt.Errorf("%w: unknown sse event %q", ErrMalformed, e.Event)
	}
}
