package mqttquic

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/streamconn"
)

// connect311 is a valid MQTT 3.1.1 CONNECT (client id "raw", keep-alive 30).
var connect311 = []byte{0x10, 0x0f, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x1e, 0x00, 0x03, 'r', 'a', 'w'}

// rawSession dials the server over QUIC, opens the MQTT stream, writes b
// and closes the write side. It returns the bytes read back and the error
// the connection was closed with.
func rawSession(t testing.TB, p *testPKI, addr string, b []byte) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: p.Pool(), ServerName: "localhost", NextProtos: []string{ALPN}}, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer qc.CloseWithError(0, "")
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	if _, err := s.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = s.Close()
	_ = s.SetReadDeadline(time.Now().Add(8 * time.Second))
	got, rerr := io.ReadAll(s)
	if rerr == nil {
		// The broker ended the stream cleanly (FIN) and waits for us to
		// close, as a well-behaved client does.
		return got, nil
	}
	select {
	case <-qc.Context().Done():
		return got, context.Cause(qc.Context())
	case <-ctx.Done():
		return got, nil
	}
}

func TestMalformedBytesCloseOnlyThatConnection(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil)
	addr := "localhost:" + portOf(s.QUICAddr().String())

	// A healthy session that must survive every malformed one.
	sub := newClient(t, p, quicURL(s), nil)
	pub := newClient(t, p, quicURL(s), nil)
	ch := subscribe(t, sub, "healthy/#")
	waitSubscribed(t, pub, ch, "healthy/probe")

	tests := []struct {
		name   string
		in     []byte
		reason string
	}{
		{"http instead of mqtt", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "malformed mqtt"},
		{"first packet not connect", []byte{0xc0, 0x00}, "first packet must be connect"},
		{"bad remaining length", []byte{0x10, 0xff, 0xff, 0xff, 0xff, 0x01}, "malformed mqtt"},
		{"oversized packet", []byte{0x10, 0xff, 0xff, 0xff, 0x7f}, "too large"},
		{"truncated connect", connect311[:9], "malformed mqtt"},
		{"bad protocol name", append([]byte{0x10, 0x0f, 0x00, 0x04, 'M', 'Q', 'X', 'X'}, connect311[8:]...), "malformed mqtt"},
		{"garbage after connect", append(append([]byte{}, connect311...), 0xf0, 0x03, 1, 2, 3), "malformed mqtt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rawSession(t, p, addr, tt.in)
			code, reason, ok := streamconn.CloseReason(err)
			if !ok {
				t.Fatalf("connection not closed with an application error: %v", err)
			}
			if code != streamconn.CodeProtocolError || !strings.Contains(reason, tt.reason) {
				t.Fatalf("closed with code %d reason %q, want code %d reason containing %q", code, reason, streamconn.CodeProtocolError, tt.reason)
			}
			// The healthy session still works.
			if _, err := pub.Publish(context.Background(), "healthy/x", []byte(tt.name), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
			if m := recv(t, ch, "healthy message"); string(m.Payload) != tt.name {
				t.Fatalf("got %q", m.Payload)
			}
		})
	}
	if s.ProtocolErrors() < int64(len(tests)) {
		t.Errorf("protocol errors counted %d, want >= %d", s.ProtocolErrors(), len(tests))
	}
}

func TestCleanSessionCloseReason(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil)
	addr := "localhost:" + portOf(s.QUICAddr().String())
	// CONNECT then DISCONNECT: CONNACK comes back, and the connection ends
	// without an error code.
	got, err := rawSession(t, p, addr, append(append([]byte{}, connect311...), 0xe0, 0x00))
	if !bytes.HasPrefix(got, []byte{0x20, 0x02, 0x00, 0x00}) {
		t.Fatalf("no CONNACK: % x", got)
	}
	if code, _, ok := streamconn.CloseReason(err); ok && code != streamconn.CodeNoError {
		t.Fatalf("closed with code %d: %v", code, err)
	}
}

func TestNoStreamTimesOut(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, func(o *Options) { o.StreamTimeout = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, "localhost:"+portOf(s.QUICAddr().String()), &tls.Config{RootCAs: p.Pool(), ServerName: "localhost", NextProtos: []string{ALPN}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-qc.Context().Done()
	code, reason, ok := streamconn.CloseReason(context.Cause(qc.Context()))
	if !ok || code != streamconn.CodeRefused || !strings.Contains(reason, "no MQTT stream") {
		t.Fatalf("got %v", context.Cause(qc.Context()))
	}
}

func TestWrongALPNRefused(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := quic.DialAddr(ctx, "localhost:"+portOf(s.QUICAddr().String()), &tls.Config{RootCAs: p.Pool(), ServerName: "localhost", NextProtos: []string{"h3"}}, nil)
	var te *quic.TransportError
	if !errors.As(err, &te) || !te.ErrorCode.IsCryptoError() {
		t.Fatalf("dial with ALPN h3: %v, want a TLS alert", err)
	}
}

// FuzzStreamAdapter feeds arbitrary bytes into the MQTT stream of a real
// QUIC connection: the server must never panic, must end the session, and
// must keep serving other clients.
func FuzzStreamAdapter(f *testing.F) {
	f.Add(connect311)
	f.Add([]byte{0xc0, 0x00})
	f.Add(append(append([]byte{}, connect311...), 0x30, 0x05, 0x00, 0x01, 'a', 'h', 'i'))
	f.Add([]byte{0x10, 0xff, 0xff, 0xff, 0x7f})
	p := newPKI(f)
	s := startServer(f, p, nil)
	addr := "localhost:" + portOf(s.QUICAddr().String())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		_, _ = rawSession(t, p, addr, b)
		// The server still completes a CONNECT/CONNACK with someone else.
		got, _ := rawSession(t, p, addr, append(append([]byte{}, connect311...), 0xe0, 0x00))
		if !bytes.HasPrefix(got, []byte{0x20, 0x02, 0x00, 0x00}) {
			t.Fatalf("server stopped answering after % x: got % x", b, got)
		}
	})
}
