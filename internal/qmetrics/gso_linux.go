package qmetrics

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// gsoSegmentSize returns the UDP_SEGMENT size in a control message buffer,
// or 0 if there is none.
func gsoSegmentSize(oob []byte) int {
	if len(oob) == 0 {
		return 0
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_UDP && m.Header.Type == unix.UDP_SEGMENT && len(m.Data) >= 2 {
			return int(binary.NativeEndian.Uint16(m.Data))
		}
	}
	return 0
}
