package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// stalledSub is a subscription whose client stopped reading once the
// response header came; readGap reads, at last, until the gap that
// announces the losses.
type stalledSub struct {
	readGap func() error
}

// tinyRcvBuf dials TCP with a 4 KiB receive buffer (no autotuning), so that
// a client that does not read stops the broker's writes at once.
func tinyRcvBuf(b *brokertest.Broker, protos ...string) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	return tls.DialWithDialer(d, "tcp", b.TCPAddr().String(), &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: protos})
}

// untilGap reads a subscription body, binary or SSE, until a gap.
func untilGap(body io.Reader, sse bool) error {
	if sse {
		r := wire.NewSSEReader(body)
		for {
			ev, err := r.Next()
			if err != nil {
				return err
			}
			if ev.Event == "message" {
				continue
			}
			if f, err := ev.Frame(); err == nil && f.IsGap() {
				return nil
			}
		}
	}
	dec := wire.NewDecoder(body, 0)
	for {
		f, err := dec.Frame()
		if err != nil {
			return err
		}
		if f.IsGap() {
			return nil
		}
	}
}

// stalledH1 subscribes over HTTP/1.1 on TCP and stops reading after the
// response header.
func stalledH1(sse bool) func(t *testing.T, b *brokertest.Broker) stalledSub {
	return func(t *testing.T, b *brokertest.Broker) stalledSub {
		c, err := tinyRcvBuf(b, "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // bounds a hang only
		accept := wire.ContentType
		if sse {
			accept = wire.ContentTypeSSE
		}
		if _, err := fmt.Fprintf(c, "GET /v1/topics/big HTTP/1.1\r\nHost: localhost\r\nAccept: %s\r\n\r\n", accept); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReaderSize(c, 512)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("subscribe: %v %v", resp, err)
		}
		return stalledSub{readGap: func() error { return untilGap(resp.Body, sse) }}
	}
}

// stalledH2 subscribes over HTTP/2 on TCP with an 8 KiB stream window and
// stops reading after the response header; readGap opens the windows.
func stalledH2(sse bool) func(t *testing.T, b *brokertest.Broker) stalledSub {
	return func(t *testing.T, b *brokertest.Broker) stalledSub {
		c, err := tinyRcvBuf(b, "h2")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // bounds a hang only
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 8 << 10}); err != nil {
			t.Fatal(err)
		}
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		accept := wire.ContentType
		if sse {
			accept = wire.ContentTypeSSE
		}
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "localhost"}, {":path", "/v1/topics/big"}, {"accept", accept}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		for headers := false; !headers; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.HeadersFrame:
				headers = true
			case *http2.GoAwayFrame, *http2.RSTStreamFrame:
				t.Fatalf("subscribe: %v", f)
			}
		}
		return stalledSub{readGap: func() error {
			pr, pw := io.Pipe()
			go func() {
				_ = fr.WriteWindowUpdate(0, 1<<30)
				_ = fr.WriteWindowUpdate(1, 1<<30)
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						pw.CloseWithError(err)
						return
					}
					if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
						if _, err := pw.Write(d.Data()); err != nil {
							return
						}
						if n := uint32(len(d.Data())); n > 0 {
							_ = fr.WriteWindowUpdate(0, n)
							_ = fr.WriteWindowUpdate(1, n)
						}
					}
				}
			}()
			defer pr.Close()
			return untilGap(pr, sse)
		}}
	}
}

// stalledH3SSE subscribes with EventSource's Accept over HTTP/3 with an
// 8 KiB stream window, and does not read.
func stalledH3SSE(t *testing.T, b *brokertest.Broker) stalledSub {
	c := newClient(t, b, nil)
	c.c = testutil.H3ClientQUIC(b.PKI.Pool(), nil, nil, &quic.Config{
		InitialStreamReceiveWindow: 8 << 10, MaxStreamReceiveWindow: 8 << 10,
		InitialConnectionReceiveWindow: 16 << 10, MaxConnectionReceiveWindow: 16 << 10,
		MaxIdleTimeout: 5 * time.Minute, // only the broker ends the stream
	})
	t.Cleanup(func() { c.c.Transport.(*http3.Transport).Close() })
	s := c.mustSubscribe("big", "", true)
	return stalledSub{readGap: func() error { return untilGap(s.resp.Body, true) }}
}

// TestStalledSubscriberEveryHTTPPath: a subscriber that never reads holds
// at most Limits.QueueBytes (--queue-bytes) in the broker on every HTTP
// path beside TestStalledSubscribersHoldBoundedBytes's binary HTTP/3
// stream: binary and EventSource (text/event-stream) subscriptions over
// HTTP/1.1 and HTTP/2 on TCP, and EventSource over HTTP/3. 40 messages of
// 256 KiB (10 MiB) are published to it; its queue stays within 1 MiB,
// the heap grows by a few MiB at most, the losses are counted, and when it
// reads at last it gets the gap that announces them.
func TestStalledSubscriberEveryHTTPPath(t *testing.T) {
	const (
		payloadSize = 256 << 10
		perSub      = 1 << 20
		n           = 40
	)
	for _, tc := range []struct {
		name string
		sub  func(t *testing.T, b *brokertest.Broker) stalledSub
	}{
		{"tcp http/1.1 binary", stalledH1(false)},
		{"tcp http/1.1 sse", stalledH1(true)},
		{"tcp h2 binary", stalledH2(false)},
		{"tcp h2 sse", stalledH2(true)},
		{"h3 sse", stalledH3SSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{QueueBytes: perSub, QueueBytesTotal: 2 * perSub, HistoryPerTopic: -1}})
			pub := newClient(t, b, nil)
			s := tc.sub(t, b)
			eventually(t, "the subscription", func() bool { return b.Stats().Subscriptions == 1 })
			publishToStalled(t, b, pub, n, payloadSize, perSub, 5*perSub)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.readGap() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("reading at last: no gap: %v", err)
				}
			case <-ctx.Done():
				t.Error("reading at last: no gap within 30 s")
			}
		})
	}
}
