package netimpair_test

import (
	"fmt"
	"net"
	"time"

	"github.com/quiot/quiot/internal/netimpair"
)

func ExampleNew() {
	server, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer server.Close()
	link := netimpair.Direction{Delay: 10 * time.Millisecond, LossPct: 1, RateKbit: 1000}
	relay, err := netimpair.New(netimpair.Options{Upstream: server.LocalAddr().String(), Up: link, Down: link, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer relay.Close()
	// Clients dial relay.Addr() instead of the server.
	fmt.Println(relay.Addr().IP)
	// Output: 127.0.0.1
}
