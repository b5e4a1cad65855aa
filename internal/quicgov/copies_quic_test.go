package quicgov

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

	"github.com/quiot/quiot/internal/testutil"
)

// copyGate holds the first datagram read, and those after it, until a
// copy of the first arrives, then hands them over in the order they came;
// with lose, the first is lost, and only its copy delivers what it
// carried. Either way the client reads nothing before the server's copy
// went. With loseShort, the long-header datagrams before the first
// short-header one pass, and that one is the datagram lost. Only
// quic-go's read loop calls ReadFrom.
type copyGate struct {
	net.PacketConn
	lose, loseShort bool
	first           []byte
	queue           []fakeRead
	open            atomic.Bool // the copy came
}

func (g *copyGate) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		if g.open.Load() && len(g.queue) > 0 {
			r := g.queue[0]
			g.queue = g.queue[1:]
			return copy(p, r.p), r.from, nil
		}
		buf := make([]byte, 1500)
		n, a, err := g.PacketConn.ReadFrom(buf)
		if err != nil || g.open.Load() {
			return copy(p, buf[:n]), a, err
		}
		d := buf[:n]
		switch {
		case g.first == nil && g.loseShort && d[0]&0x80 != 0:
			return copy(p, d), a, nil
		case g.first == nil:
			g.first = d
			if g.lose || g.loseShort {
				continue
			}
		case bytes.Equal(d, g.first):
			g.open.Store(true)
		}
		g.queue = append(g.queue, fakeRead{d, a})
	}
}

// dropCounter counts the packets a connection drops as duplicates or for
// keys it no longer has (a copy of what it already read).
type dropCounter struct{ dup, noKeys atomic.Int64 }

func (z *dropCounter) RecordEvent(e qlogwriter.Event) {
	if e, ok := e.(qlog.PacketDropped); ok {
		switch e.Trigger {
		case qlog.PacketDropDuplicate:
			z.dup.Add(1)
		case qlog.PacketDropKeysUnavailable:
			z.noKeys.Add(1)
		}
	}
}
func (z *dropCounter) Close() error                     { return nil }
func (z *dropCounter) AddProducer() qlogwriter.Recorder { return z }

// TestFirstFlightCopyQUIC: quic-go serves through the governor with
// first-flight copies; a client on a 2 x 25 ms path connects once (the
// governor learns its IP's answer time, the client a session ticket),
// then resumes with its request in 0-RTT data.
//
// "lost": the server's first datagram of the second connection is lost,
// and the client reads nothing more until its copy comes (copyGate): the
// copy completes the handshake, and the request is answered. Without the
// copies the connection timed out.
//
// "the answer lost": the request takes two 0-RTT datagrams, so the
// server answers after its first flight, in a short-header datagram of
// its own; the first such datagram is lost, and the client reads nothing
// more until its copy comes (without short-header copies, quic-go's
// retransmission after its probe timeout is another packet, and the
// connection timed out).
//
// "nothing lost": the client reads the server's first datagram only once
// its copy came too; it drops the copy's packets (duplicate packet
// numbers, or Initial keys already dropped) and the request is answered
// once, as it was sent.
func TestFirstFlightCopyQUIC(t *testing.T) {
	o := Options{FirstFlightCopies: true}
	for _, w := range []struct {
		name string
		wrap func(*net.UDPConn) (net.PacketConn, *Conn)
	}{
		{"one datagram per call", func(u *net.UDPConn) (net.PacketConn, *Conn) { c := New(u, o); return c, c }},
		{"Wrap (GSO, ECN, batched reads on Linux)", func(u *net.UDPConn) (net.PacketConn, *Conn) {
			w := WrapWith(u, true, o)
			return w, governorOf(w)
		}},
	} {
		for _, loss := range []copyLoss{lossNone, lossFirst, lossAnswer} {
			t.Run(w.name+", "+loss.String(), func(t *testing.T) { testFirstFlightCopyQUIC(t, w.wrap, loss) })
		}
	}
}

// copyLoss is what the client's side of TestFirstFlightCopyQUIC loses.
type copyLoss int

const (
	lossNone   copyLoss = iota // nothing
	lossFirst                  // the server's first datagram
	lossAnswer                 // the server's first short-header datagram
)

func (l copyLoss) String() string {
	return [...]string{"nothing lost", "the first datagram lost", "the answer lost"}[l]
}

func testFirstFlightCopyQUIC(t *testing.T, wrap func(*net.UDPConn) (net.PacketConn, *Conn), loss copyLoss) {
	var got atomic.Int64 // request bytes the server read on the second connection
	addr, gov := serveStreams(t, wrap, func() *quic.Transport { return &quic.Transport{} }, &quic.Config{Allow0RTT: true},
		func(s *quic.Stream) {
			n, _ := io.Copy(io.Discard, s)
			got.Store(n)
			_, _ = fmt.Fprintf(s, "%d", n)
		})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cache := testutil.NewTicketSignal(4)
	ctls := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"t"}, ClientSessionCache: cache,
		CurvePreferences: []tls.CurveID{tls.X25519}}
	request := bytes.Repeat([]byte("x"), 200)
	delay := 25 * time.Millisecond
	if loss == lossAnswer {
		// Two 0-RTT datagrams; and copies 50 ms after the first flight
		// (a quarter of the 200 ms answer time), long after the answer.
		request = bytes.Repeat([]byte("x"), 1500)
		delay = 100 * time.Millisecond
	}
	var drops dropCounter
	for i := range 2 {
		cu, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		var pc net.PacketConn = newDelayConn(cu, delay)
		gate := &copyGate{PacketConn: pc, lose: loss == lossFirst, loseShort: loss == lossAnswer}
		conf := &quic.Config{}
		if i == 1 {
			pc = gate
			conf.Tracer = func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return &drops }
		}
		ctr := &quic.Transport{Conn: pc}
		c := testutil.QUICExchange(ctx, t, ctr, addr, ctls, conf, request, i)
		if i == 0 {
			select { // the ticket the second connection resumes with
			case <-cache.Stored:
			case <-ctx.Done():
				t.Fatal("no session ticket")
			}
		} else {
			if !c.ConnectionState().Used0RTT {
				t.Error("0-RTT not used")
			}
			if !gate.open.Load() {
				t.Error("no copy of the datagram the gate waited for reached the client")
			}
		}
		_ = c.CloseWithError(0, "")
		_ = ctr.Close()
		_ = cu.Close()
	}
	st := gov.Stats()
	t.Logf("governor: %+v; client dropped %d duplicate packets, %d for keys dropped", st, drops.dup.Load(), drops.noKeys.Load())
	if st.Copied == 0 {
		t.Fatal("no first-flight datagram copied")
	}
	if n := got.Load(); n != int64(len(request)) {
		t.Fatalf("the server read %d request bytes, want %d", n, len(request))
	}
	if loss == lossNone && drops.dup.Load()+drops.noKeys.Load() == 0 {
		t.Fatal("the client dropped none of the copy's packets")
	}
}
