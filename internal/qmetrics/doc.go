// Package qmetrics measures a QUIC role (publisher, subscriber, broker) from
// inside its process, for the eight metrics of docs/BENCH.md:
//
//   - NewCountingPacketConn wraps the UDP socket under a quic.Transport and
//     counts UDP payload bytes and datagrams in both directions (metrics 5
//     and 6), keeping quic-go's batched reads, GSO and ECN working.
//   - Tracer is a quic.Config.Tracer that counts packets sent, received,
//     lost and retransmitted, PTO expiries, and QUIC (and HTTP/3) frames by
//     type.
//   - Latency records per-message latencies in an HdrHistogram and reports
//     p50/p95/p99/max in milliseconds (metric 3).
//   - RoleMetrics is the per-role JSON document written by --metrics-out.
package qmetrics
