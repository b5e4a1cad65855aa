package mqtt

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"
)

// writeConn is a connection whose writes are discarded and reported to
// wrote; reads block until Close.
type writeConn struct {
	wrote  func(p []byte)
	closed chan struct{}
}

func (c *writeConn) Read(p []byte) (int, error)         { <-c.closed; return 0, net.ErrClosed }
func (c *writeConn) Write(p []byte) (int, error)        { c.wrote(p); return len(p), nil }
func (c *writeConn) Close() error                       { return nil }
func (c *writeConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *writeConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *writeConn) SetDeadline(t time.Time) error      { return nil }
func (c *writeConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *writeConn) SetWriteDeadline(t time.Time) error { return nil }

// newWriteClient returns a client on a writeConn calling wrote.
func newWriteClient(wrote func(p []byte)) *Client {
	cl := newClient(&writeConn{wrote: wrote, closed: make(chan struct{})}, &ops{
		info:  new(system.Info),
		hooks: new(Hooks),
		log:   logger,
		options: &Options{Capabilities: &Capabilities{
			ReceiveMaximum: 10, MaximumInflight: 5, TopicAliasMaximum: 10000,
			MaximumClientWritesPending: 16, maximumPacketID: 10,
		}},
	})
	cl.Properties.ProtocolVersion = 4
	return cl
}

// queue queues pk for cl as publishToClient does.
func queue(cl *Client, pk *packets.Packet) bool {
	if !cl.State.outbound.push(pk) {
		return false
	}
	atomic.AddInt32(&cl.State.outboundQty, 1)
	cl.startWriter()
	return true
}

// BenchmarkFanoutWrite queues one PUBLISH for each of 100 or 1000
// clients, as a message's fan-out does, and waits until all are written:
// the cost of the writers (a goroutine started per burst, change 1) and of
// the writes to a connection that discards them.
func BenchmarkFanoutWrite(b *testing.B) {
	for _, clients := range []int{100, 1000} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchmarkFanoutWrite(b, clients) })
	}
}

func benchmarkFanoutWrite(b *testing.B, clients int) {
	var wg sync.WaitGroup
	cls := make([]*Client, clients)
	for i := range cls {
		cls[i] = newWriteClient(func([]byte) { wg.Done() })
		cls[i].roomChan() // made before the first push, so no wake-up is lost
	}
	defer func() {
		for _, cl := range cls {
			cl.Stop(errClientStop)
		}
	}()
	pk := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 0}, TopicName: "bench/topic", Payload: make([]byte, 110)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wg.Add(clients)
		for _, cl := range cls {
			for !queue(cl, pk) {
				<-cl.roomChan()
			}
		}
		wg.Wait()
	}
}
