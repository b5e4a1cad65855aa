//go:build linux

package capture

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/quiot/quiot/probe/netns"
	"golang.org/x/sys/unix"
)

const (
	tpStatusKernel = 0
	tpStatusUser   = 1
	// offsets inside tpacket_block_desc (version, offset_to_priv, hdr.bh1)
	bdBlockStatus = 8
	bdNumPkts     = 12
	bdFirstPkt    = 16
	// sockaddr_ll follows tpacket3_hdr at TPACKET_ALIGN(sizeof(tpacket3_hdr)).
	sllOffset  = 48
	sllPktType = 10
	frameSize  = 2048
)

// Handle is an open capture. Run it from one goroutine; Stats and Close may
// be called from others.
type Handle struct {
	o       Options
	fd      int
	ring    []byte
	ifindex int
	blk     int // next ring block to read (kept across Run calls)

	mu     sync.Mutex
	runMu  sync.Mutex // held by Run; Close waits for it before unmapping
	stats  Stats
	closed atomic.Bool
	once   sync.Once
}

// Open creates the AF_PACKET socket (inside o.Namespace when set), attaches
// the filter, maps a TPACKET_V3 ring and binds to the interface.
func Open(o Options) (*Handle, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	h := &Handle{o: o, fd: -1}
	err := netns.Do(o.Namespace, h.open)
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func (h *Handle) where() string {
	if h.o.Namespace == "" {
		return fmt.Sprintf("interface %q", h.o.Interface)
	}
	return fmt.Sprintf("interface %q in namespace %q", h.o.Interface, h.o.Namespace)
}

func (h *Handle) open() error {
	o := &h.o
	ifi, err := net.InterfaceByName(o.Interface)
	if err != nil {
		return fmt.Errorf("capture on %s: no such interface: %w", h.where(), err)
	}
	h.ifindex = ifi.Index
	// Protocol 0: no packets arrive before the filter and ring are in place.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("capture on %s: AF_PACKET socket: %w (needs root or CAP_NET_RAW)", h.where(), err)
		}
		return fmt.Errorf("capture on %s: AF_PACKET socket: %w", h.where(), err)
	}
	h.fd = fd
	raw, err := assemble(o.Filter, o.Direction, uint32(o.SnapLen))
	if err != nil {
		return err
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return fmt.Errorf("capture on %s: attach filter: %w", h.where(), err)
	}
	if o.Direction == In {
		// Best effort (Linux >= 4.20); the filter drops outgoing packets anyway.
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	}
	// Turn on kernel software timestamps of skbs (netstamp), so the ring
	// carries the stack's receive/transmit time.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS_NEW, 1); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return fmt.Errorf("capture on %s: enable timestamps: %w", h.where(), err)
		}
	}
	if o.Hardware {
		if err := enableHWTimestamps(fd, o.Interface); err != nil {
			o.Logger.Debug("hardware timestamps unavailable, using software", "interface", o.Interface, "err", err)
		} else if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_TIMESTAMP, unix.SOF_TIMESTAMPING_RAW_HARDWARE); err != nil {
			o.Logger.Debug("hardware timestamps unavailable, using software", "interface", o.Interface, "err", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return fmt.Errorf("capture on %s: TPACKET_V3: %w", h.where(), err)
	}
	req := unix.TpacketReq3{
		Block_size:     uint32(o.BlockSize),
		Block_nr:       uint32(o.Blocks),
		Frame_size:     frameSize,
		Frame_nr:       uint32(o.BlockSize / frameSize * o.Blocks),
		Retire_blk_tov: uint32(max(1, o.BlockTimeout.Milliseconds())),
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fmt.Errorf("capture on %s: PACKET_RX_RING (%d x %d bytes): %w", h.where(), o.Blocks, o.BlockSize, err)
	}
	ring, err := unix.Mmap(fd, 0, o.BlockSize*o.Blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("capture on %s: mmap ring: %w", h.where(), err)
	}
	h.ring = ring
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("capture on %s: bind: %w", h.where(), err)
	}
	// Counters so far belong to nobody's packets: reset them.
	_, _ = unix.GetsockoptTpacketStatsV3(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Interface returns the interface name.
func (h *Handle) Interface() string { return h.o.Interface }

// Run delivers packets to fn until ctx is done (then it returns nil) or an
// error occurs. When ctx is done it still delivers the blocks the kernel has
// already retired (at most one ring's worth), so a reader that lags behind
// loses nothing; packets in a partly filled block are retired by the kernel
// after BlockTimeout, so let the ring drain that long before cancelling ctx
// when the tail matters.
func (h *Handle) Run(ctx context.Context, fn func(*Packet)) error {
	h.runMu.Lock()
	defer h.runMu.Unlock()
	if h.closed.Load() {
		return fmt.Errorf("capture on %s: handle closed", h.where())
	}
	bs := h.o.BlockSize
	var p Packet
	drained := 0
	pfd := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN | unix.POLLERR}}
	for ; ; h.blk = (h.blk + 1) % h.o.Blocks {
		block := h.ring[h.blk*bs : (h.blk+1)*bs]
		status := (*uint32)(unsafe.Pointer(&block[bdBlockStatus]))
		for atomic.LoadUint32(status)&tpStatusUser == 0 {
			if ctx.Err() != nil || h.closed.Load() {
				return nil
			}
			if _, err := unix.Poll(pfd, 50); err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("capture on %s: poll: %w", h.where(), err)
			}
		}
		n := binary.NativeEndian.Uint32(block[bdNumPkts:])
		off := binary.NativeEndian.Uint32(block[bdFirstPkt:])
		for i := uint32(0); i < n; i++ {
			hdr := (*unix.Tpacket3Hdr)(unsafe.Pointer(&block[off]))
			mac := off + uint32(hdr.Mac)
			p.Time = time.Unix(int64(hdr.Sec), int64(hdr.Nsec))
			p.Hardware = hdr.Status&unix.TP_STATUS_TS_RAW_HARDWARE != 0
			p.Stamped = hdr.Status&(unix.TP_STATUS_TS_SOFTWARE|unix.TP_STATUS_TS_RAW_HARDWARE) != 0
			p.Type = PacketType(block[off+sllOffset+sllPktType])
			p.Len = int(hdr.Len)
			p.Data = block[mac : mac+hdr.Snaplen : mac+hdr.Snaplen]
			fn(&p)
			off += hdr.Next_offset
		}
		atomic.StoreUint32(status, tpStatusKernel)
		if h.closed.Load() {
			h.blk = (h.blk + 1) % h.o.Blocks
			return nil
		}
		if ctx.Err() != nil {
			// Finish what is already retired, but not forever.
			if drained++; drained >= h.o.Blocks {
				h.blk = (h.blk + 1) % h.o.Blocks
				return nil
			}
		}
	}
}

// Stats returns the counters accumulated since Open (each read of
// PACKET_STATISTICS resets the kernel's counters, so they are summed here).
func (h *Handle) Stats() (Stats, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed.Load() {
		return h.stats, nil
	}
	st, err := unix.GetsockoptTpacketStatsV3(h.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return h.stats, fmt.Errorf("capture on %s: PACKET_STATISTICS: %w", h.where(), err)
	}
	h.stats.Packets += uint64(st.Packets)
	h.stats.Drops += uint64(st.Drops)
	h.stats.FreezeQ += uint64(st.Freeze_q_cnt)
	return h.stats, nil
}

// Close stops a running Run (within 50 ms, waiting for it) and releases the
// socket and the ring. Stats keeps answering with the final counters.
func (h *Handle) Close() error {
	var err error
	h.once.Do(func() {
		if h.fd >= 0 {
			_, _ = h.Stats()
		}
		h.closed.Store(true)
		h.runMu.Lock()
		defer h.runMu.Unlock()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.ring != nil {
			err = unix.Munmap(h.ring)
			h.ring = nil
		}
		if h.fd >= 0 {
			err = errors.Join(err, unix.Close(h.fd))
			h.fd = -1
		}
	})
	return err
}

// hwtstampConfig is struct hwtstamp_config.
type hwtstampConfig struct {
	Flags    int32
	TxType   int32
	RxFilter int32
}

// ifreqData is struct ifreq with the ifr_data member.
type ifreqData struct {
	Name [unix.IFNAMSIZ]byte
	Data uintptr
	_    [16]byte
}

func enableHWTimestamps(fd int, ifname string) error {
	cfg := &hwtstampConfig{TxType: 0 /* HWTSTAMP_TX_OFF */, RxFilter: 1 /* HWTSTAMP_FILTER_ALL */}
	req := &ifreqData{}
	copy(req.Name[:], ifname)
	req.Data = uintptr(unsafe.Pointer(cfg))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCSHWTSTAMP, uintptr(unsafe.Pointer(req)))
	runtime.KeepAlive(cfg)
	if errno != 0 {
		return fmt.Errorf("SIOCSHWTSTAMP %s: %w", ifname, errno)
	}
	return nil
}
