//go:build !linux

package quicgov

import "net"

// oobWrap keeps quic-go's optimisations on Linux only (oob_linux.go).
func oobWrap(*Conn, net.PacketConn) (net.PacketConn, bool) { return nil, false }
