// Package match pairs the packets seen at an ingress port with the same
// packets seen at an egress port and turns each pair into a delay (egress
// timestamp - ingress timestamp).
//
// Keys: in active mode a packet is identified by the probe header the
// generator wrote (flow, sequence; see probe/gen); in passive mode by a
// 64-bit FNV-1a hash of the UDP payload (QUIC payloads are unique), and its
// flow by a hash of the 5-tuple.
//
// Counted, never silently dropped: packets seen at ingress but never at egress
// (Lost), extra egress copies of a packet already matched (Duplicated, e.g.
// flooded copies), egress packets whose sequence within their flow is below
// one already seen at egress (Reordered), and egress packets never seen at
// ingress (EgressOnly).
package match
