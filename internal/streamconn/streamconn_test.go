package streamconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/testutil"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"longer text", 6, "longer"},
		{"héllo", 2, "h"}, // does not split the 2-byte é
		{"", 0, ""},
	}
	for _, tt := range tests {
		if got := Truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// pair returns both ends of one QUIC stream on loopback.
func pair(t *testing.T) (client, server *Conn) {
	t.Helper()
	pki := testutil.NewPKI(t)
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}, NextProtos: []string{"mqtt"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, ln.Addr().String(), &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost", NextProtos: []string{"mqtt"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Write([]byte{0}); err != nil { // a stream exists for the peer once it carries data
		t.Fatal(err)
	}
	sc, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sc.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(ss, b); err != nil {
		t.Fatal(err)
	}
	client, server = New(qc, cs, true), New(sc, ss, false)
	t.Cleanup(func() { _ = client.Close(); _ = sc.CloseWithError(0, "") })
	return client, server
}

func TestConnRoundTripAndClose(t *testing.T) {
	c, s := pair(t)
	var _ net.Conn = c
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q %v", b, err)
	}
	if s.ConnectionState().Version != tls.VersionTLS13 || s.QUIC() == nil || s.RemoteAddr() == nil || s.LocalAddr() == nil {
		t.Fatal("connection state not exposed")
	}
	// Finish on the server: the client reads what was written, then EOF.
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "pong" {
		t.Fatalf("client read %q %v", got, err)
	}
	if _, err := s.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	// CloseWithError: the client sees the code and reason.
	if err := s.CloseWithError(CodeProtocolError, "malformed mqtt: test"); err != nil {
		t.Fatal(err)
	}
	<-c.QUIC().Context().Done()
	code, reason, ok := CloseReason(context.Cause(c.QUIC().Context()))
	if !ok || code != CodeProtocolError || reason != "malformed mqtt: test" {
		t.Fatalf("close reason %d %q %v", code, reason, ok)
	}
	if _, _, ok := CloseReason(io.EOF); ok {
		t.Fatal("io.EOF taken for an application close")
	}
}

// TestPacketsStayWhole: paho.golang writes each packet's fixed header and
// body as separate Writes, from several goroutines (the caller's SUBSCRIBE
// or PUBLISH, the pinger's PINGREQ). Over a Conn every packet reaches the
// peer whole. Before Conn was a sync.Locker a PINGREQ could land between a
// SUBSCRIBE's header and body, and the broker closed the connection as
// malformed (found as a rare hang of MQTT-over-QUIC tests).
func TestPacketsStayWhole(t *testing.T) {
	c, s := pair(t)
	var _ sync.Locker = c
	const writers, each = 4, 1000
	errc := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				var err error
				if w%2 == 0 {
					_, err = (&packets.Pingreq{}).WriteTo(c)
				} else {
					sub := &packets.Subscribe{PacketID: uint16(i + 1), Subscriptions: []packets.SubOptions{{Topic: fmt.Sprintf("w%d/%d/#", w, i), QoS: 1}}, Properties: &packets.Properties{}}
					_, err = sub.WriteTo(c)
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range writers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// A torn packet can announce more bytes than follow: bound the reads
	// so that shows as a failure, not a hang.
	if err := s.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	counts := map[byte]int{}
	for n := 0; n < writers*each; n++ {
		cp, err := packets.ReadPacket(s)
		if err != nil {
			t.Fatalf("packet %d of %d: %v (a packet was split by another writer's)", n+1, writers*each, err)
		}
		if sub, ok := cp.Content.(*packets.Subscribe); ok && (len(sub.Subscriptions) != 1 || !strings.HasPrefix(sub.Subscriptions[0].Topic, "w")) {
			t.Fatalf("packet %d: mangled SUBSCRIBE %+v", n+1, sub.Subscriptions)
		}
		counts[cp.Type]++
	}
	if counts[packets.PINGREQ] != writers/2*each || counts[packets.SUBSCRIBE] != writers/2*each {
		t.Fatalf("read %v, want %d PINGREQ and %d SUBSCRIBE", counts, writers/2*each, writers/2*each)
	}
}
