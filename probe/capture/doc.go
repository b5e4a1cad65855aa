// Package capture receives packets on one network interface through an
// AF_PACKET socket with a TPACKET_V3 memory-mapped ring, in pure Go
// (golang.org/x/sys/unix, no cgo), with kernel timestamps.
//
// Timestamps: the socket turns on kernel software receive timestamps
// (SO_TIMESTAMPNS_NEW), so the ring's tp_sec/tp_nsec carry the time the kernel
// stamped the skb (on receive: when the frame entered the stack, netif_rx /
// netif_receive_skb; on transmit: when the frame was handed to packet taps in
// dev_queue_xmit). With [Options.Hardware] the NIC's raw hardware timestamps
// are requested (SIOCSHWTSTAMP) and used where the driver delivers them;
// [Packet.Hardware] says which one a packet carries.
//
// Every packet reports its sll_pkttype ([PacketType]): frames arriving at a
// switch port are [OtherHost] (or [Host]), frames the port transmits are
// [Outgoing], so ingress and egress are told apart on one interface.
//
// Ring drops are read with PACKET_STATISTICS (tpacket_stats_v3) and
// accumulated; [Handle.Stats] reports them and callers must report them.
package capture
