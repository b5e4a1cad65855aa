package qmetrics

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/quic-go/quic-go"
)

// BenchmarkUDPConn compares a write and a read of one 1200-byte datagram
// through a plain *net.UDPConn and through the counting wrapper.
func BenchmarkUDPConn(b *testing.B) {
	for _, mode := range []string{"plain", "counting"} {
		b.Run(mode, func(b *testing.B) {
			a := listenLoopback(b)
			r := listenLoopback(b)
			var wa, wr net.PacketConn = a, r
			if mode == "counting" {
				wa, wr = NewCountingPacketConn(a), NewCountingPacketConn(r)
			}
			buf, rbuf := make([]byte, 1200), make([]byte, 1500)
			dst := r.LocalAddr()
			b.SetBytes(1200)
			for b.Loop() {
				if _, err := wa.WriteTo(buf, dst); err != nil {
					b.Fatal(err)
				}
				if _, _, err := wr.ReadFrom(rbuf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func listenLoopback(tb testing.TB) *net.UDPConn {
	tb.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkQUICTransfer moves 4 MiB over a QUIC stream on loopback (the
// server acknowledges the end with one byte) through plain sockets,
// counting sockets, and counting sockets plus the tracer: the wrapper's and
// the tracer's cost where it matters, with quic-go's GSO and recvmmsg paths.
func BenchmarkQUICTransfer(b *testing.B) {
	const size = 4 << 20
	for _, mode := range []string{"plain", "counting", "counting+tracer"} {
		b.Run(mode, func(b *testing.B) {
			stls, ctls := tlsConfigs(b, "bench")
			sc, cc := listenLoopback(b), listenLoopback(b)
			var spc, cpc net.PacketConn = sc, cc
			scfg, ccfg := &quic.Config{}, &quic.Config{}
			if mode != "plain" {
				spc, cpc = NewCountingPacketConn(sc), NewCountingPacketConn(cc)
			}
			if mode == "counting+tracer" {
				scfg.Tracer = NewTracer(nil).ConnectionTracer
				ccfg.Tracer = NewTracer(nil).ConnectionTracer
			}
			str, ctr := &quic.Transport{Conn: spc}, &quic.Transport{Conn: cpc}
			b.Cleanup(func() { ctr.Close(); str.Close() })
			ln, err := str.Listen(stls, scfg)
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				conn, err := ln.Accept(context.Background())
				if err != nil {
					return
				}
				for {
					s, err := conn.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go func() {
						io.Copy(io.Discard, s)
						s.Write([]byte{1})
						s.Close()
					}()
				}
			}()
			conn, err := ctr.Dial(context.Background(), sc.LocalAddr(), ctls, ccfg)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.CloseWithError(0, "")
			buf := make([]byte, 64<<10)
			b.SetBytes(size)
			for b.Loop() {
				s, err := conn.OpenStreamSync(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				for sent := 0; sent < size; sent += len(buf) {
					if _, err := s.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				s.Close()
				if _, err := io.ReadAll(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nopConn is a net.PacketConn whose reads and writes return at once: the
// wrapper's own cost, without system calls.
type nopConn struct{ net.PacketConn }

func (nopConn) WriteTo(p []byte, _ net.Addr) (int, error) { return len(p), nil }
func (nopConn) ReadFrom(p []byte) (int, net.Addr, error)  { return len(p), nil, nil }

// BenchmarkCountingOverhead is the wrapper's cost per write+read pair
// without system calls (compare plain and counting).
func BenchmarkCountingOverhead(b *testing.B) {
	for _, mode := range []string{"plain", "counting"} {
		b.Run(mode, func(b *testing.B) {
			var c net.PacketConn = nopConn{}
			if mode == "counting" {
				c = NewCountingPacketConn(c)
			}
			buf := make([]byte, 1200)
			for b.Loop() {
				c.WriteTo(buf, nil)
				c.ReadFrom(buf)
			}
		})
	}
}
