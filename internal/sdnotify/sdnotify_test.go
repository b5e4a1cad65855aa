package sdnotify

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// notifySocket listens on a unixgram socket as systemd would and points
// $NOTIFY_SOCKET at it.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", p)
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestStart(t *testing.T) {
	c := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "20000") // 20 ms: pings every 10 ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Start(ctx, "serving", nil); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "READY=1\nSTATUS=serving" {
		t.Fatalf("first message %q", got)
	}
	for i := 0; i < 3; i++ {
		if got := recv(t, c); got != "WATCHDOG=1" {
			t.Fatalf("ping %d: %q", i, got)
		}
	}
}

func TestOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	ok, err := Ready("x")
	if ok || err != nil {
		t.Fatalf("Ready = %v, %v; want false, nil", ok, err)
	}
	iv, err := WatchdogInterval()
	if iv != 0 || err != nil {
		t.Fatalf("WatchdogInterval = %v, %v", iv, err)
	}
	Watchdog(context.Background(), 0, nil) // returns at once
}

func TestUnhealthySkipsPing(t *testing.T) {
	c := notifySocket(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	calls := make(chan struct{}, 100)
	go func() {
		defer close(done)
		Watchdog(ctx, time.Millisecond, func() error {
			calls <- struct{}{}
			return os.ErrDeadlineExceeded
		})
	}()
	for i := 0; i < 3; i++ {
		<-calls
	}
	cancel()
	<-done
	Stopping()
	if got := recv(t, c); !strings.HasPrefix(got, "STOPPING=1") {
		t.Fatalf("got %q, want only STOPPING=1 (no pings while unhealthy)", got)
	}
}
