package client

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// pipeConn is a net.Conn that records what is written and reads from r.
type pipeConn struct {
	net.Conn
	w bytes.Buffer
	r io.Reader
}

func (c *pipeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *pipeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }

// oneByteReader hands out one byte per Read, the worst split of a stream.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func encode(t *testing.T, p io.WriterTo) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestEarlyConn: the early PUBLISH follows paho's CONNECT however paho
// splits its writes, and its PUBACK is taken out of the stream paho reads,
// however the stream is split.
func TestEarlyConn(t *testing.T) {
	connect := encode(t, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "dev", KeepAlive: 60, CleanStart: false})
	connack := encode(t, &packets.Connack{})
	ours := encode(t, &packets.Puback{PacketID: earlyPacketID, ReasonCode: 0})
	refused := encode(t, &packets.Puback{PacketID: earlyPacketID, ReasonCode: 0x87})
	theirs := encode(t, &packets.Puback{PacketID: 1})
	delivery := encode(t, &packets.Publish{Topic: "a/b", Payload: bytes.Repeat([]byte("p"), 300), QoS: 1, PacketID: 7})
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name     string
		splits   []int // CONNECT written in pieces of these sizes
		in       io.Reader
		want     []byte // what paho reads
		code     byte
		wantLost bool
	}{
		{"one write, PUBACK after CONNACK", nil, bytes.NewReader(cat(connack, ours, delivery)), cat(connack, delivery), 0, false},
		{"split write, byte by byte", []int{1, 1, 3}, &oneByteReader{cat(connack, theirs, ours, delivery)}, cat(connack, theirs, delivery), 0, false},
		{"refused", []int{2}, bytes.NewReader(cat(connack, refused)), connack, 0x87, false},
		{"lost before the PUBACK", nil, bytes.NewReader(connack), connack, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := newMQTTEarly("wake/up", []byte("hi"), false, time.Unix(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			pc := &pipeConn{r: tt.in}
			c := newEarlyConn(pc, e)
			rest := connect
			for _, n := range tt.splits {
				if _, err := c.Write(rest[:n]); err != nil {
					t.Fatal(err)
				}
				if e.wasWritten() {
					t.Fatal("PUBLISH written inside the CONNECT")
				}
				rest = rest[n:]
			}
			if _, err := c.Write(rest); err != nil {
				t.Fatal(err)
			}
			if !e.wasWritten() {
				t.Fatal("PUBLISH not written after the CONNECT")
			}
			if _, err := c.Write(theirs); err != nil { // paho's next packet
				t.Fatal(err)
			}
			if want := cat(connect, e.pkt, theirs); !bytes.Equal(pc.w.Bytes(), want) {
				t.Fatalf("wrote % x\nwant % x", pc.w.Bytes(), want)
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("paho read % x\nwant % x", got, tt.want)
			}
			select {
			case <-e.done:
			default:
				t.Fatal("early publish not finished")
			}
			code, _, err := e.result()
			if tt.wantLost != errors.Is(err, errEarlyLost) || code != tt.code {
				t.Fatalf("result: code 0x%02x, err %v; want code 0x%02x, lost %v", code, err, tt.code, tt.wantLost)
			}
		})
	}
}
