package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Direction selects which packets of an interface a capture keeps.
type Direction int

const (
	// Any keeps received and transmitted packets.
	Any Direction = iota
	// In keeps packets the interface receives (every type but Outgoing).
	In
	// Out keeps packets the interface transmits (Outgoing).
	Out
)

// String returns "any", "in" or "out".
func (d Direction) String() string {
	switch d {
	case In:
		return "in"
	case Out:
		return "out"
	}
	return "any"
}

// PacketType is the kernel's sll_pkttype of a captured frame.
type PacketType uint8

// Packet types (linux/if_packet.h).
const (
	Host      PacketType = 0 // addressed to this host
	Broadcast PacketType = 1
	Multicast PacketType = 2
	OtherHost PacketType = 3 // addressed to another host (a switch port's ingress)
	Outgoing  PacketType = 4 // transmitted by this interface
)

// String names the type.
func (t PacketType) String() string {
	switch t {
	case Host:
		return "host"
	case Broadcast:
		return "broadcast"
	case Multicast:
		return "multicast"
	case OtherHost:
		return "otherhost"
	case Outgoing:
		return "outgoing"
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Packet is one captured frame. Data aliases the ring and is valid only
// during the handler call; copy what you keep.
type Packet struct {
	Time     time.Time // kernel timestamp
	Hardware bool      // Time is a NIC hardware timestamp
	// Stamped is true when Time is the skb's own timestamp (software or
	// hardware); false when the kernel had none and took the time when it
	// copied the packet into the ring (a little later).
	Stamped bool
	Type    PacketType // sll_pkttype
	Len     int        // length on the wire (without FCS)
	Data    []byte     // captured bytes (at most SnapLen), starting at the Ethernet header
}

// Stats are cumulative ring counters since Open (PACKET_STATISTICS).
type Stats struct {
	Packets uint64 // packets that passed the filter, dropped ones included
	Drops   uint64 // packets dropped because the ring was full
	FreezeQ uint64 // times the ring's queue was frozen (tp_freeze_q_cnt)
}

// Options configures Open. The zero value of every field but Interface is a
// usable default.
type Options struct {
	// Interface to bind to (required).
	Interface string
	// Namespace is the `ip netns` name the interface lives in; "" = current.
	Namespace string
	// Direction of the packets kept; default Any.
	Direction Direction
	// Filter selects packets in the kernel; nil keeps all. See UDPFilter.
	Filter Filter
	// SnapLen is the number of bytes kept of each packet; default 256.
	SnapLen int
	// BlockSize is the ring block size in bytes (a power of two >= the page
	// size); default 128 KiB.
	BlockSize int
	// Blocks is the number of ring blocks; default 128. The kernel retires a
	// block when it is full or after BlockTimeout, so the ring absorbs a
	// stalled reader for Blocks x BlockTimeout at low rates (default about
	// 1 s) and Blocks x BlockSize bytes at high rates (16 MiB, about 0.3 s of
	// 200,000 small packets/s).
	Blocks int
	// BlockTimeout retires a partly filled block to user space after this
	// long; default 8 ms (the latency of live output).
	BlockTimeout time.Duration
	// Hardware requests NIC hardware timestamps (SIOCSHWTSTAMP, changes the
	// NIC's configuration); where unsupported, software timestamps are used
	// and a debug line is logged.
	Hardware bool
	// Logger; default discards.
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Interface == "" {
		return errors.New("capture: no interface given")
	}
	if o.SnapLen == 0 {
		o.SnapLen = 256
	}
	if o.SnapLen < 64 || o.SnapLen > 65535 {
		return fmt.Errorf("capture: snap length %d out of range 64..65535", o.SnapLen)
	}
	if o.BlockSize == 0 {
		o.BlockSize = 128 << 10
	}
	if o.BlockSize < 4096 || o.BlockSize&(o.BlockSize-1) != 0 {
		return fmt.Errorf("capture: block size %d is not a power of two >= 4096", o.BlockSize)
	}
	if o.Blocks == 0 {
		o.Blocks = 128
	}
	if o.Blocks < 2 {
		return fmt.Errorf("capture: %d blocks, need at least 2", o.Blocks)
	}
	if o.BlockTimeout == 0 {
		o.BlockTimeout = DefaultBlockTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DefaultBlockTimeout is the default Options.BlockTimeout.
const DefaultBlockTimeout = 8 * time.Millisecond

// ErrUnsupported is returned by Open on systems without AF_PACKET.
var ErrUnsupported = errors.New("capture: AF_PACKET capture needs Linux")
