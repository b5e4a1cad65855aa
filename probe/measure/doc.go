// Package measure runs one measurement condition: it captures at an ingress
// and an egress interface, sends the probe stream (probe/gen) from a
// generator namespace to a UDP sink, matches the packets (probe/match, active
// mode) and returns the per-packet delays and the loss, duplicate, reorder and
// ring-drop counts.
//
// # What a delay is
//
// delay = egress timestamp - ingress timestamp, both kernel software
// timestamps of the same host clock (CLOCK_REALTIME) taken by AF_PACKET taps
// (probe/capture): at the ingress port the time the frame entered the stack
// (for a veth: when the peer's transmit queued it to this CPU's backlog), at
// the egress port the time the switch handed it to that port's transmit path
// (dev_queue_xmit's packet taps). A switch's delay therefore includes the
// backlog's softirq scheduling, the switch's own processing and queueing,
// and for OVS's userspace datapath the wake-up of ovs-vswitchd.
//
// # The probe floor
//
// The floor is the delay this method reports when there is no switch to
// measure, i.e. what the timestamps, the taps and the kernel path between
// the two capture points cost by themselves. It is measured on the same
// topology the lab uses, with OVS replaced by a plain Linux bridge
// (netns.NewPath with Bridge: true):
//
//	gen netns: GenDev --veth-- Ingress [bridge] Egress --veth-- SinkDev :sink netns
//	                          ^capture in          ^capture out
//
// Ingress and Egress are the same interfaces OVS would own as ports 1 and 2;
// a switch's delay above the floor is what the switch adds. A second, lower
// floor is the two ends of one veth pair (capture where GenDev transmits and
// where its peer receives: IngressNamespace=GenNS, IngressDir=capture.Out,
// EgressDir=capture.In), which isolates the taps and one veth hop.
//
// Measured on the 2-core build host while other jobs kept it busy (load
// average 9-16), go test -run XXX -bench Floor -benchtime=1x
// ./probe/measure/ (10,000 packets/s of 128-byte frames for 2 s, 20,000
// packets, 0 lost, 0 ring drops): bridge floor p50 3.1-4.0 us (min 1.9-2.4,
// p99 16-24 us); veth-pair floor p50 0.8-1.8 us (min 0.6-0.8, p99 5-14 us).
//
// # Generator
//
// By default the probe goes out through UDP sockets in GenNamespace (one per
// flow); on the build host that reaches about 30,000-55,000 packets/s
// through the bridge path. GenInterface switches to frame injection with
// AF_PACKET (sendmmsg batches when behind schedule); on veths the whole path
// runs in the sender's softirq, so the sender's CPU sets the ceiling. With
// GenRealTime (SCHED_FIFO) as well, the busy build host reached 134,000-
// 149,000 packets/s through the bridge path, both captures matching all of
// them without ring drops (go test -run XXX -bench CaptureRate -benchtime=1x
// ./probe/measure/). GenRealTime also steadies pacing on a busy host: the
// median gap error at 1,000 packets/s falls from about 1 ms to 1 us
// (BenchmarkPacing in probe/gen). It spins a core at high rates, with the
// kernel's RT throttling leaving other tasks 5 % of it.
//
// # Ring drops
//
// Both captures read PACKET_STATISTICS; Result.IngressRingDrops and
// EgressRingDrops are non-zero when the rings overflowed and the delays are
// then incomplete (Run also logs a warning). They are never ignored.
package measure
