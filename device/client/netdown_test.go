package client

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestOutageUDPLost(t *testing.T) {
	sendErr := func(e error) error {
		return &net.OpError{Op: "write", Net: "udp", Err: os.NewSyscallError("sendmsg", e)}
	}
	tests := []struct {
		name  string
		armed bool
		err   error
		lost  bool
	}{
		{"no error", true, nil, false},
		{"network unreachable, armed", true, sendErr(syscall.ENETUNREACH), true},
		{"host unreachable, armed", true, sendErr(syscall.EHOSTUNREACH), true},
		{"network down, armed", true, sendErr(syscall.ENETDOWN), true},
		{"address not available, armed", true, sendErr(syscall.EADDRNOTAVAIL), true},
		{"network unreachable before the first connection", false, sendErr(syscall.ENETUNREACH), false},
		{"message too long", true, sendErr(syscall.EMSGSIZE), false},
		{"closed socket", true, net.ErrClosed, false},
		{"other", true, errors.New("boom"), false},
	}
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newOutageUDP(u, slog.New(slog.DiscardHandler))
			if tt.armed {
				c.arm()
			}
			if got := c.lost(tt.err); got != tt.lost {
				t.Fatalf("lost(%v) = %v, want %v", tt.err, got, tt.lost)
			}
			if want := map[bool]int64{true: 1, false: 0}[tt.lost]; c.dropped.Load() != want {
				t.Fatalf("dropped = %d, want %d", c.dropped.Load(), want)
			}
		})
	}
}
