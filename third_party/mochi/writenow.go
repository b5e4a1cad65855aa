package mqtt

import (
	"bytes"
	"errors"
	"sync/atomic"
	"syscall"

	"github.com/mochi-mqtt/server/v2/packets"
)

// quiot: a delivery written on the publisher's goroutine (QUIOT.md,
// change 17).
//
// Since change 1 a client has a writer goroutine only while packets are
// queued for it, so every delivery to an idle subscriber started one: a
// goroutine start, the growth of its stack to encode the packet, a
// scheduler pass and an exit, for one write. At 1000 MQTT/TCP subscribers
// that was most of the user time in which quiot spent 6x mosquitto's
// (docs/BENCH.md, "Where the rest of the CPU goes"). Now a delivery to a
// client with nothing queued and no writer is written by the goroutine
// delivering it, with a write that does not wait: a socket that has room
// takes it at once, as mosquitto's single thread writes. A full socket
// takes nothing, or a part: the rest is kept in the client's output
// buffer for a writer started to flush it, so a slow subscriber never
// holds up the publisher, and packets keep their order (the next one
// waits behind the buffer). Only connections that hand out their socket
// (syscall.Conn: MQTT/TCP) are written so; TLS, WebSocket and QUIC
// streams keep the writer goroutine.

// errWouldWait is what a write that does not wait returns when the socket
// has no room.
var errWouldWait = errors.New("socket has no room")

// writeNow writes pk to the client on the calling goroutine if the client
// has no writer, nothing queued and nothing buffered, and its connection
// has a socket that can be written without waiting; it reports whether it
// took pk. pk is written whole, or partly with the rest buffered for a
// writer it starts, or, if the write fails, dropped as the writer drops a
// packet it cannot write (a QoS 1 or 2 message stays in flight). When it
// reports false the caller queues pk as before.
func (cl *Client) writeNow(pk *packets.Packet) bool {
	if cl.Net.Conn == nil || cl.State.outbound.len() != 0 || !cl.State.writing.CompareAndSwap(false, true) {
		return false
	}
	var took, rest bool
	if rc := cl.rawConn(); rc != nil {
		took, rest = cl.writeHeld(pk, rc)
	}
	if rest {
		go cl.writeQueued() // the writer role, still held, passes to it
		return took
	}
	cl.State.writing.Store(false)
	if cl.State.outbound.len() != 0 { // queued while the role was held here
		cl.startWriter()
	}
	return took
}

// rawConn returns the socket of the client's connection, or nil if it
// has none, looked up on first use, with the writer role held (by which
// raw and rawLooked are guarded). Not in newClient, which runs on the
// connection's reader: only a client that gets a delivery needs it, and
// the reader's stack is kept small (QUIOT.md, change 9).
func (cl *Client) rawConn() syscall.RawConn {
	if !cl.Net.rawLooked {
		cl.Net.raw, cl.Net.rawLooked = rawOf(cl.Net.Conn), true
	}
	return cl.Net.raw
}

// writeHeld is writeNow's part with the writer role held, writing to the
// client's socket rc; rest reports that part of pk was left in the output
// buffer.
func (cl *Client) writeHeld(pk *packets.Packet, rc syscall.RawConn) (took, rest bool) {
	if cl.State.outbound.len() != 0 || !cl.TryLock() {
		return false, false // queued meanwhile, or a direct write under way
	}
	defer cl.Unlock()
	if cl.Net.outbuf != nil || cl.Closed() {
		return false, false
	}
	out := *pk // the encode hooks and limits change the copy, not the packet held in flight
	buf := encodeBufs.Get()
	defer encodeBufs.Put(buf)
	cl.preparePacket(&out)
	out = cl.ops.hooks.OnPacketEncode(cl, out)
	if err := encodePacket(&out, buf); err != nil {
		cl.ops.log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", pk)
		return true, false
	}
	b := buf.Bytes()
	n, err := writeNoWait(rc, b)
	switch {
	case err == nil && n == len(b):
	case err == nil || errors.Is(err, errWouldWait):
		cl.Net.outbuf = bytes.NewBuffer(append([]byte(nil), b[n:]...))
		rest = true
	default:
		cl.ops.log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", pk)
		return true, false
	}
	// Counted as WritePacket counts a packet. Not a function shared with
	// it: one taking the packet by value would add its 1.6 KB frame to
	// WritePacket's depth.
	atomic.AddInt64(&cl.ops.info.BytesSent, int64(len(b)))
	atomic.AddInt64(&cl.ops.info.PacketsSent, 1)
	atomic.AddInt64(&cl.ops.info.MessagesSent, 1) // a PUBLISH: publishToClient's
	atomic.AddInt64(&cl.ops.info.InlineWrites, 1)
	cl.ops.hooks.OnPacketSent(cl, out, b)
	return true, rest
}

// flushPending writes what a write that did not wait left in the output
// buffer (writeHeld), waiting for the socket as the writer does.
func (cl *Client) flushPending() {
	cl.Lock()
	defer cl.Unlock()
	if cl.Net.outbuf == nil || cl.Closed() {
		return
	}
	if err := cl.flushOutbuf(); err != nil {
		cl.ops.log.Debug("failed flushing packets", "error", err, "client", cl.ID)
	}
}

// writeDirect writes what buf holds for WritePacket, with cl locked and
// nothing queued or buffered: as a delivery does (writeHeld), with one
// raw write(2) that does not wait when the connection hands out its
// socket and no writer holds the role; what the socket did not take, and
// everything on other connections, with a write that waits, as before.
//
// WritePacket answers the packets a client sends (the PUBACK of each of
// a publisher's messages, SUBACK, PINGRESP); through net.Conn.Write each
// entered a system call the scheduler sees, and when its monitor thread
// slept because every processor was idle that woke it and set it ticking
// at its shortest interval again: the monitor was about a third of the context
// switches at 1000 MQTT/TCP subscribers (QUIOT.md, change 26).
func (cl *Client) writeDirect(buf *bytes.Buffer) (int64, error) {
	if !cl.State.writing.CompareAndSwap(false, true) {
		return buf.WriteTo(cl.Net.Conn)
	}
	var n int
	if rc := cl.rawConn(); rc != nil {
		n, _ = writeNoWait(rc, buf.Bytes()) // an error comes again from the write below
	}
	cl.State.writing.Store(false)
	if cl.State.outbound.len() != 0 { // queued while the role was held here
		cl.startWriter() // its writer waits for cl's lock, held until this write ends
	}
	if n == buf.Len() {
		return int64(n), nil
	}
	buf.Next(n)
	m, err := buf.WriteTo(cl.Net.Conn)
	return int64(n) + m, err
}
