package broker

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestListenPair: the HTTP/3 socket and the HTTP/1.1+2 listener share a
// port; with port 0 a UDP port whose TCP twin another socket holds is
// given back and another pair tried; with a fixed port that is an error
// naming the port.
func TestListenPair(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	// The first UDP socket the kernel would hand out is on the taken port.
	calls := 0
	listenPacket = func(network, addr string) (net.PacketConn, error) {
		calls++
		if calls == 1 {
			addr = "127.0.0.1:" + strconv.Itoa(port)
		}
		return net.ListenPacket(network, addr)
	}
	defer func() { listenPacket = net.ListenPacket }()

	udp, tln, err := ListenPair("127.0.0.1:0", true)
	if err != nil {
		t.Fatalf("port 0 with the first pair taken: %v", err)
	}
	up, tp := udp.LocalAddr().(*net.UDPAddr).Port, tln.Addr().(*net.TCPAddr).Port
	_ = udp.Close()
	_ = tln.Close()
	// At least a second attempt: on a busy host other sockets may hold the
	// TCP twins of later UDP ports too, and each costs one more attempt.
	if calls < 2 || up != tp || up == port {
		t.Fatalf("%d attempts, udp %d tcp %d (taken %d): want a later pair on one port", calls, up, tp, port)
	}

	calls = 1 // no more redirection
	if _, _, err := ListenPair("127.0.0.1:"+strconv.Itoa(port), true); err == nil || !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Fatalf("fixed port with its TCP twin taken: %v", err)
	}
	udp, tln, err = ListenPair("127.0.0.1:0", false)
	if err != nil || tln != nil {
		t.Fatalf("without TCP: %v, listener %v", err, tln)
	}
	_ = udp.Close()
}
