// SPDX-License-Identifier: MIT

package mqtt

import (
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// discardConn is a net.Conn that takes every write and never has
// anything to read.
type discardConn struct {
	net.Conn
	written atomic.Int64
	closed  chan struct{}
}

func newDiscardConn() *discardConn { return &discardConn{closed: make(chan struct{})} }

func (c *discardConn) Write(b []byte) (int, error) {
	c.written.Add(int64(len(b)))
	return len(b), nil
}
func (c *discardConn) Read([]byte) (int, error)         { <-c.closed; return 0, net.ErrClosed }
func (c *discardConn) Close() error                     { return nil }
func (c *discardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *discardConn) SetDeadline(time.Time) error      { return nil }
func (c *discardConn) SetReadDeadline(time.Time) error  { return nil }
func (c *discardConn) SetWriteDeadline(time.Time) error { return nil }

// retainedCounter counts OnRetainPublished.
type retainedCounter struct {
	HookBase
	n atomic.Int64
}

func (h *retainedCounter) ID() string { return "retained-counter" }
func (h *retainedCounter) Provides(b byte) bool {
	return b == OnRetainPublished
}
func (h *retainedCounter) OnRetainPublished(*Client, packets.Packet) { h.n.Add(1) }

// cpuTime returns the CPU time of the process (user and system), in
// nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkRetainedReplay: the CPU and allocations of one SUBSCRIBE's
// retained replay (QoS 0, to a client whose connection takes every
// write), until every message is written: all 2000 of 2000 retained
// messages; 20 of 20,020 (a selective filter over a large store: the
// walk in retain order examines every retained message, mochi's walk of
// the tree only the filter's branch).
func BenchmarkRetainedReplay(b *testing.B) {
	for _, bb := range []struct {
		name          string
		other, picked int
		filter        string
	}{
		{"all-2000", 0, 2000, "s/#"},
		{"20-of-20020", 20000, 20, "s/#"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			s := newServer()
			count := new(retainedCounter)
			_ = s.AddHook(count, nil)
			payload := []byte("0123456789abcdef")
			for i := 0; i < bb.other; i++ {
				s.Topics.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("r/%05d", i), Payload: payload, FixedHeader: packets.FixedHeader{Retain: true}})
			}
			for i := 0; i < bb.picked; i++ {
				s.Topics.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("s/%05d", i), Payload: payload, FixedHeader: packets.FixedHeader{Retain: true}})
			}
			conn := newDiscardConn()
			cl := s.NewClient(conn, "t", "c", false)
			cl.Properties.ProtocolVersion = 5
			sub := packets.Subscription{Filter: bb.filter}
			s.Topics.Subscribe(cl.ID, sub)
			cl.State.Subscriptions.Add(sub.Filter, sub)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				s.publishRetainedToClient(cl, sub, false)
				want := int64(i+1) * int64(bb.picked)
				for count.n.Load() < want || cl.State.outbound.len() > 0 || cl.State.writing.Load() {
					time.Sleep(10 * time.Microsecond)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
