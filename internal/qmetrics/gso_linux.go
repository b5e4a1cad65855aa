package qmetrics

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// gsoSegmentSize returns the UDP_SEGMENT size in a control message buffer,
// or 0 if there is none. It does not allocate (it runs on every write).
func gsoSegmentSize(oob []byte) int {
	// x/sys reads the header before checking the length: guard it.
	for len(oob) >= unix.SizeofCmsghdr {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_SEGMENT && len(data) >= 2 {
			return int(binary.NativeEndian.Uint16(data))
		}
		oob = rest
	}
	return 0
}
