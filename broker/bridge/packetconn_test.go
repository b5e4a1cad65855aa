package bridge

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
)

// recordCounter passes a TLS connection's raw bytes through and counts
// the application-data records in them (TLS 1.2: the handshake is not
// application data), whatever the TCP segments. It hands the TLS layer at
// most one record a Read, so the count is of the records the server has
// taken, not of those the socket held already (a record read ahead of the
// packet the test stops at would be counted otherwise).
type recordCounter struct {
	net.Conn
	pending []byte // raw bytes received, not handed on yet
	left    int    // bytes of the current record still to hand on
	records atomic.Int64
}

// fill reads from the connection until pending holds n bytes.
func (c *recordCounter) fill(n int) error {
	buf := make([]byte, 4096)
	for len(c.pending) < n {
		k, err := c.Conn.Read(buf)
		c.pending = append(c.pending, buf[:k]...)
		if err != nil && len(c.pending) < n {
			return err
		}
	}
	return nil
}

func (c *recordCounter) Read(p []byte) (int, error) {
	if c.left == 0 {
		if err := c.fill(5); err != nil {
			return 0, err
		}
		c.left = 5 + (int(c.pending[3])<<8 | int(c.pending[4]))
		if c.pending[0] == 23 { // application_data
			c.records.Add(1)
		}
	}
	if err := c.fill(1); err != nil {
		return 0, err
	}
	n := copy(p, c.pending[:min(len(c.pending), c.left)])
	c.pending = c.pending[n:]
	c.left -= n
	return n, nil
}

// TestOneRecordPerPacket: over mqtts:// each MQTT packet the bridge sends
// is one TLS record (paho writes a packet in several pieces; each piece
// was a record of its own, with 22 B of overhead and a TCP segment).
func TestOneRecordPerPacket(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		packets, records int64
		types            []byte
		err              error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := l.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		rc := &recordCounter{Conn: raw}
		c := tls.Server(rc, &tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}, MaxVersion: tls.VersionTLS12})
		defer c.Close()
		r := bufio.NewReader(c)
		var packets int64
		var types []byte
		for {
			first, body, err := readPacket(r)
			if err != nil {
				done <- result{err: err}
				return
			}
			packets++
			types = append(types, first>>4) // CONNECT, perhaps PINGREQ, PUBLISH
			switch first >> 4 {
			case pktConnect:
				_, err = c.Write([]byte{0x20, 3, 0, 0, 0}) // CONNACK, MQTT 5
			case pktPublish:
				n, _ := str2(body)
				_, err = c.Write([]byte{0x40, 2, body[n], body[n+1]}) // PUBACK
				done <- result{packets: packets, records: rc.records.Load(), types: types, err: err}
				// Keep the connection until the test ends.
				_, _ = r.ReadByte()
				return
			}
			if err != nil {
				done <- result{err: err}
				return
			}
		}
	}()
	caFile := pki.CAFile(t)
	edge := brokertest.Start(t, pki, nil)
	cs, err := Parse(fmt.Appendf(nil, "[[bridge]]\nname = \"up\"\nurl = \"mqtts://localhost:%d\"\nca_file = %q\nout = [\"t/#\"]\nusername = \"u\"\npassword = \"p\"\n",
		l.Addr().(*net.TCPAddr).Port, caFile))
	if err != nil {
		t.Fatal(err)
	}
	br, err := New(edge.Broker, cs[0], testutil.DiscardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Close(ctx)
	if _, err := edge.Broker.Publish(ctx, broker.Message{Topic: "t/a", Payload: make([]byte, 256), QoS: 1, Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.packets < 2 || res.records != res.packets {
			t.Fatalf("%d MQTT packets (types %v) in %d TLS records, want one record each", res.packets, res.types, res.records)
		}
	case <-ctx.Done():
		t.Fatal("no PUBLISH")
	}
}
