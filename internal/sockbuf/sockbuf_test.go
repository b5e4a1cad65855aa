package sockbuf

import (
	"errors"
	"net"
	"testing"
)

// sizedConn records the sizes it was given.
type sizedConn struct {
	net.PacketConn
	read, write int
}

func (c *sizedConn) SetReadBuffer(n int) error  { c.read = n; return nil }
func (c *sizedConn) SetWriteBuffer(n int) error { c.write = n; return errors.New("refused") }

// wrapper overrides WriteTo the way the repository's wrappers do.
type wrapper struct{ Conn }

func (w *wrapper) WriteTo(p []byte, a net.Addr) (int, error) { return w.Conn.WriteTo(p, a) }

func TestPassesSizingThrough(t *testing.T) {
	sc := &sizedConn{}
	var pc net.PacketConn = &wrapper{Wrap(sc)}
	r, ok := pc.(interface{ SetReadBuffer(int) error })
	if !ok {
		t.Fatal("wrapper hides SetReadBuffer")
	}
	if err := r.SetReadBuffer(1 << 20); err != nil || sc.read != 1<<20 {
		t.Fatalf("SetReadBuffer: err %v, socket got %d", err, sc.read)
	}
	w := pc.(interface{ SetWriteBuffer(int) error })
	if err := w.SetWriteBuffer(4096); err == nil || sc.write != 4096 {
		t.Fatalf("SetWriteBuffer: err %v (want the socket's), socket got %d", err, sc.write)
	}
}

func TestWithoutSizingIsNoop(t *testing.T) {
	c := Wrap(struct{ net.PacketConn }{})
	if err := c.SetReadBuffer(1); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWriteBuffer(1); err != nil {
		t.Fatal(err)
	}
}
