//go:build !linux

package client

import (
	"context"
	"errors"
	"net"
	"net/netip"
)

// addrWatch is Linux only (rtnetlink); elsewhere the broker follows an
// address change at the connection's next datagram.
type addrWatch struct{}

func watchAddresses(context.Context, *net.UDPConn, func()) (*addrWatch, error) {
	return nil, errors.New("address changes are watched on Linux only")
}

func (*addrWatch) source(*net.UDPAddr) (netip.Addr, error) {
	return netip.Addr{}, errors.New("address changes are watched on Linux only")
}
