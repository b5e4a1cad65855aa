package probehold

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/testutil"
)

// serverGate is the server's socket. Once armed, it takes the first
// Initial datagram it reads as the client's first datagram and hands it
// and what follows it over only when an exact copy of it arrives, in the
// order they came; with lose, the first is lost and only its copy
// delivers what it carried. Only quic-go's read loop calls ReadFrom.
type serverGate struct {
	net.PacketConn
	lose  bool
	armed atomic.Bool
	first []byte
	queue []gated
	open  atomic.Bool // the copy came
}

type gated struct {
	p    []byte
	from net.Addr
}

func (g *serverGate) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		if g.open.Load() && len(g.queue) > 0 {
			r := g.queue[0]
			g.queue = g.queue[1:]
			return copy(p, r.p), r.from, nil
		}
		buf := make([]byte, 1500)
		n, a, err := g.PacketConn.ReadFrom(buf)
		d := buf[:n]
		if err != nil || g.open.Load() || !g.armed.Load() || g.first == nil && !initial(d) {
			return copy(p, d), a, err
		}
		switch {
		case g.first == nil:
			g.first = d
			if g.lose {
				continue
			}
		case bytes.Equal(d, g.first):
			g.open.Store(true)
		}
		g.queue = append(g.queue, gated{d, a})
	}
}

// dupCounter counts the packets a server connection drops as duplicates.
type dupCounter struct{ n atomic.Int64 }

func (z *dupCounter) RecordEvent(e qlogwriter.Event) {
	if e, ok := e.(qlog.PacketDropped); ok && e.Trigger == qlog.PacketDropDuplicate {
		z.n.Add(1)
	}
}
func (z *dupCounter) Close() error                     { return nil }
func (z *dupCounter) AddProducer() qlogwriter.Recorder { return z }

// TestFirstFlightCopyQUIC: a quic-go client connects once to a quic-go
// server over loopback (for a session ticket), then resumes with its
// request in 0-RTT data through a Conn with first-flight copies and a 30
// s hold (quic-go's probes cannot repair anything in the test's time).
//
// "lost": the client's first datagram of the second connection is lost,
// and the server reads nothing more until its copy comes (serverGate):
// the copy completes the handshake and the request is answered. Without
// the copies the connection timed out.
//
// "nothing lost": the server reads the client's first datagram only once
// its copy came too; it drops the copy's packets as duplicates and reads
// the request once, as it was sent.
func TestFirstFlightCopyQUIC(t *testing.T) {
	for _, lost := range []bool{true, false} {
		name := "nothing lost"
		if lost {
			name = "the first datagram lost"
		}
		t.Run(name, func(t *testing.T) { testFirstFlightCopyQUIC(t, lost) })
	}
}

func testFirstFlightCopyQUIC(t *testing.T, lost bool) {
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	su, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = su.Close() })
	gate := &serverGate{PacketConn: su, lose: lost}
	str := &quic.Transport{Conn: gate}
	t.Cleanup(func() { _ = str.Close() })
	var dups dupCounter
	ln, err := str.ListenEarly(&tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"t"}},
		&quic.Config{Allow0RTT: true, Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return &dups }})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64 // request bytes the server read
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				s, err := c.AcceptStream(context.Background())
				if err != nil {
					return
				}
				n, _ := io.Copy(io.Discard, s)
				got.Store(n)
				_, _ = fmt.Fprintf(s, "%d", n)
				_ = s.Close()
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cache := testutil.NewTicketSignal(4)
	ctls := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"t"}, ClientSessionCache: cache,
		CurvePreferences: []tls.CurveID{tls.X25519}} // the ClientHello fits one datagram, as lean's
	request := bytes.Repeat([]byte("x"), 200)
	var hold *Conn
	for i := range 2 {
		cu, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		var pc net.PacketConn = cu
		if i == 1 {
			gate.armed.Store(true)
			hold = NewWithOptions(cu, 30*time.Second, Options{FirstFlightCopies: true})
			pc = hold
		}
		ctr := &quic.Transport{Conn: pc}
		c := testutil.QUICExchange(ctx, t, ctr, ln.Addr(), ctls, &quic.Config{}, request, i)
		if i == 0 {
			select { // the ticket the second connection resumes with
			case <-cache.Stored:
			case <-ctx.Done():
				t.Fatal("no session ticket")
			}
		} else if !c.ConnectionState().Used0RTT {
			t.Error("0-RTT not used")
		}
		_ = c.CloseWithError(0, "")
		_ = ctr.Close()
		_ = cu.Close()
	}
	t.Logf("client: %d datagrams copied, %d held; server: %d duplicate packets dropped", hold.Copied(), hold.Held(), dups.n.Load())
	if !gate.open.Load() || hold.Copied() == 0 {
		t.Fatalf("no copy of the client's first datagram reached the server (%d copied)", hold.Copied())
	}
	if n := got.Load(); n != int64(len(request)) {
		t.Fatalf("the server read %d request bytes, want %d", n, len(request))
	}
	hold.mu.Lock()
	flights := hold.copyGen
	hold.mu.Unlock()
	if flights != 1 {
		t.Fatalf("%d first flights copied, want 1 (the Initial acknowledging the server's is none)", flights)
	}
	if !lost && dups.n.Load() == 0 {
		t.Fatal("the server dropped none of the copy's packets as duplicates")
	}
}
