package mqttquic

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseWhileClientsConnect: clients connecting over MQTT/TCP while the
// server closes. mochi's attachClient adds to its client wait group on the
// connection's goroutine while Close may be waiting on it (an Add from
// zero concurrent with Wait: the race detector reported it in a fresh-clone
// make test); the listener wrapper counts each connection before handing
// it to mochi and refuses new ones once Close has begun. Run with -race.
// (mochi's TCP listener drops, without closing, a connection it accepts
// after its close began; the test closes its own side once Close returned.)
func TestCloseWhileClientsConnect(t *testing.T) {
	p := newPKI(t)
	for round := range 20 {
		s := startServer(t, p, func(o *Options) { o.QUICAddr = "off"; o.TCPAddr = "127.0.0.1:0" })
		addr := s.TCPAddr()
		var wg sync.WaitGroup
		var dialed atomic.Int32
		var mu sync.Mutex
		var open []net.Conn
		ended := false // the test closed the connections: later ones close at once
		stop := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.DialTimeout("tcp", addr, time.Second)
					if err != nil {
						return // the listener is closed
					}
					dialed.Add(1)
					mu.Lock()
					if ended {
						_ = c.Close()
					}
					open = append(open, c)
					mu.Unlock()
					// CONNECT (MQTT 3.1.1, client id "r"), then wait for the end.
					_, _ = c.Write([]byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 1, 'r'})
					var b [64]byte
					for {
						if _, err := c.Read(b[:]); err != nil {
							break
						}
					}
					_ = c.Close()
				}
			}()
		}
		// Vary where Close falls among the connections: after 1 to 4 of them.
		for dialed.Load() < int32(round%4+1) {
			runtime.Gosched()
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		close(stop)
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		open, ended = nil, true
		mu.Unlock()
		wg.Wait()
	}
}

// TestClosedServerRefusesConnections: once Close has begun, a connection
// the listener still accepted is closed without reaching mochi.
func TestClosedServerRefusesConnections(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, func(o *Options) { o.QUICAddr = "off"; o.TCPAddr = "127.0.0.1:0" })
	s.compat.shut()
	c, err := net.Dial("tcp", s.TCPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write([]byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 1, 'r'})
	var b [4]byte
	if n, err := c.Read(b[:]); err == nil {
		t.Fatalf("a connection after Close began got %x, want it closed", b[:n])
	}
	if n := s.MQTT().Clients.Len(); n != 0 {
		t.Errorf("%d clients reached mochi after Close began", n)
	}
}

// TestCloseSweepsLateConnection: a connection accepted just before Close
// began, but tracked only after Close swept the listener's connections,
// was missed by the sweep: mochi's Close then waited for it until the
// client left or its CONNECT deadline ran out (TestCloseWhileClientsConnect
// took 90 s under -race so, the keep-alive of a client that had sent its
// CONNECT). The test holds the connection between being counted and being
// tracked until the sweep is over; the server must close it at once (the
// CONNECT deadline is 10 minutes here, so before the fix the read below
// waited for the test's own hang bound).
func TestCloseSweepsLateConnection(t *testing.T) {
	p := newPKI(t)
	// The seams are set before the server starts (its goroutines read
	// them) and cleared after it is closed (cleanups run last first).
	entered, swept := make(chan struct{}), make(chan struct{})
	var enterOnce, sweptOnce sync.Once
	testHookTrack = func() {
		enterOnce.Do(func() { close(entered) })
		<-swept
	}
	testHookSwept = func() { sweptOnce.Do(func() { close(swept) }) }
	t.Cleanup(func() { testHookTrack, testHookSwept = nil, nil })
	s := startServer(t, p, func(o *Options) {
		o.QUICAddr, o.TCPAddr = "off", "127.0.0.1:0"
		o.Limits.ConnectTimeout = 10 * time.Minute
	})
	c, err := net.Dial("tcp", s.TCPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang, not a timing
	var b [16]byte
	if _, err := c.Read(b[:]); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection tracked after the close's sweep stayed open")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
