//go:build linux

package watch_test

import (
	"context"
	"crypto/tls"
	"github.com/quiot/quiot/probe/netns/netnstest"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/probe/netns"
	"github.com/quiot/quiot/probe/watch"
)

// listenIn opens a UDP socket inside namespace ns.
func listenIn(t *testing.T, ns string, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := netns.Do(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWatchQUIC times real QUIC packets (a quic-go client in the generator
// namespace echoing data with a server in the sink namespace) crossing the
// bridge, matched passively by payload hash.
func TestWatchQUIC(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	cert, err := certs.SelfSigned([]string{p.Dst.String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := netip.AddrPortFrom(p.Dst, 4433)
	ln, err := quic.Listen(listenIn(t, p.SinkNS, srvAddr),
		&tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"probe-test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { // echo server
		conn, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		s, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		_, _ = io.Copy(s, s)
		s.Close()
	}()

	wctx, stopWatch := context.WithCancel(ctx)
	ready := make(chan struct{})
	type res struct {
		s   *watch.Summary
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := watch.Run(wctx, watch.Options{IngressIf: p.Ingress, EgressIf: p.Egress, Filter: "udp:4433",
			Interval: time.Hour, OnReady: func() { close(ready) }})
		ch <- res{s, err}
	}()
	select {
	case <-ready:
	case r := <-ch:
		t.Fatalf("watch ended early: %v", r.err)
	}

	conn, err := quic.Dial(ctx, listenIn(t, p.GenNS, netip.AddrPortFrom(p.Src, 0)), net.UDPAddrFromAddrPort(srvAddr),
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"probe-test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 300)
	back := make([]byte, len(msg))
	for i := 0; i < 50; i++ {
		if _, err := s.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, back); err != nil {
			t.Fatal(err)
		}
	}
	conn.CloseWithError(0, "done")
	stopWatch()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	sum := r.s
	t.Logf("QUIC client->server packets: %+v", sum)
	if sum.Matched < 50 || sum.Lost != 0 || sum.EgressOnly != 0 || sum.Duplicated != 0 || sum.P50 <= 0 {
		t.Errorf("want >= 50 QUIC packets matched, none lost: %+v", sum)
	}
}
