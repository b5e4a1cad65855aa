//go:build !linux

package mqtt

import (
	"net"
	"syscall"
)

// rawOf returns nil: writes that do not wait (Client.writeNow) are written
// only on Linux sockets; elsewhere every delivery goes through the writer.
func rawOf(net.Conn) syscall.RawConn { return nil }

// writeNoWait is never called where rawOf returns nil.
func writeNoWait(syscall.RawConn, []byte) (int, error) { return 0, errWouldWait }
