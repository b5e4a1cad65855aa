package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// fakeFanoutBroker accepts one MQTT/TCP client, answers its CONNECT and
// SUBSCRIBE, and then writes each burst (encoded PUBLISH packets) it
// receives in a single write.
func fakeFanoutBroker(t *testing.T, burst <-chan []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-ctx.Done(); _ = c.Close() }()
		for {
			cp, err := packets.ReadPacket(c)
			if err != nil {
				return
			}
			switch p := cp.Content.(type) {
			case *packets.Connect:
				ack := packets.NewControlPacket(packets.CONNACK)
				if _, err := ack.WriteTo(c); err != nil {
					return
				}
			case *packets.Subscribe:
				ack := packets.NewControlPacket(packets.SUBACK)
				sa := ack.Content.(*packets.Suback)
				sa.PacketID = p.PacketID
				sa.Reasons = []byte{0}
				if _, err := ack.WriteTo(c); err != nil {
					return
				}
				go func() {
					for b := range burst {
						if _, err := c.Write(b); err != nil {
							return
						}
					}
				}()
			}
		}
	}()
	return ln.Addr().String()
}

// readSyscalls is this process's count of read system calls so far
// (syscr in /proc/self/io).
func readSyscalls(t *testing.T) (uint64, bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscr: "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// TestMQTTReceiveCost: a PUBLISH received by the client (as the broker
// sends one of quiot's: a 128-byte payload and the send-time stamp as a
// user property) costs at most 1.2 KB in at most 20 allocations,
// and a burst of them is read with about one read system call per 4 KiB.
// paho.golang's reader alone allocated about 7 KB per PUBLISH (each field
// copied through io.CopyN into a bytes.Buffer grown by at least 512 bytes)
// and read the connection three times per packet (the first byte, the
// length, the rest), so on a Pi a fan-out of small messages was mostly
// the client's garbage and system calls (docs/mqtt.md, "Benchmarks").
func TestMQTTReceiveCost(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 128)
	pp := packets.NewControlPacket(packets.PUBLISH)
	p := pp.Content.(*packets.Publish)
	p.Topic = "fan/out"
	p.Payload = payload
	p.Properties.User = []packets.User{{Key: wire.MQTTStampProperty, Value: wire.FormatStamp(time.Now().UnixNano())}}
	var pub bytes.Buffer
	if _, err := pp.WriteTo(&pub); err != nil {
		t.Fatal(err)
	}
	burst := make(chan []byte)
	addr := fakeFanoutBroker(t, burst)
	t.Cleanup(func() { close(burst) })

	c, err := client.New(client.Options{Broker: "mqtt://" + addr, ClientID: "readcost", Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	got := make(chan int, 1)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	subErr := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-subErr })
	want := 0
	n := 0
	go func() {
		subErr <- c.Subscribe(client.WithSubscribed(ctx, func() { close(ready) }), "fan/out", 0, func(m client.Message) {
			if len(m.Payload) != len(payload) || m.Sent.IsZero() {
				t.Errorf("received %d bytes, sent %v", len(m.Payload), m.Sent)
			}
			n++
			if n == want {
				got <- n
			}
		})
	}()
	select {
	case <-ready:
	case err := <-subErr:
		t.Fatalf("Subscribe: %v", err)
	}
	// One burst to warm up (buffers, goroutine stacks), then the measured one.
	recv := func(count int, b []byte) {
		want += count
		burst <- b
		select {
		case <-got:
		case err := <-subErr:
			t.Fatalf("Subscribe returned %v", errors.Join(err, errors.New("before the burst arrived")))
		}
	}
	recv(100, bytes.Repeat(pub.Bytes(), 100))
	const count = 2000
	b := bytes.Repeat(pub.Bytes(), count) // allocated before the measurement
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r0, procIO := readSyscalls(t)
	recv(count, b)
	r1, _ := readSyscalls(t)
	runtime.ReadMemStats(&m1)
	bytesPer := float64(m1.TotalAlloc-m0.TotalAlloc) / count
	allocsPer := float64(m1.Mallocs-m0.Mallocs) / count
	t.Logf("per received PUBLISH: %.0f bytes, %.1f allocations, %.3f read syscalls", bytesPer, allocsPer, float64(r1-r0)/count)
	if bytesPer > 1200 {
		t.Errorf("%.0f bytes allocated per received PUBLISH, want <= 1200", bytesPer)
	}
	if allocsPer > 20 {
		t.Errorf("%.1f allocations per received PUBLISH, want <= 20", allocsPer)
	}
	if procIO {
		if reads := float64(r1-r0) / count; reads > 0.5 {
			t.Errorf("%.2f read system calls per received PUBLISH, want <= 0.5", reads)
		}
	}
}
