package bench

// wakeupSection precedes the NAT section of TUNING.md: the floor a slow
// link sets for a wake-up and the handshake probe hold lean takes from the
// session file. It is not measured by the study (every run makes one
// connection) but by `quiot bench-reconnect`, so it is written as it stands.
const wakeupSection = `## Wake-ups on a slow link: the floor and the probe hold

Not measured by this study (each run makes one connection) but by ` + "`quiot bench-reconnect`" + ` (docs/BENCH.md).

- **The floor.** A client cannot read an answer before the broker's first datagram, which QUIC pads to 1200 bytes (it carries an ack-eliciting Initial, RFC 9000 §14.1), and the broker cannot send it before the client's own padded first datagram arrived. A resumed wake-up with 0-RTT therefore takes at least the client's first datagram at the uplink rate + the one-way delay + the broker's first datagram at the downlink rate + the one-way delay: on nbiot (1200 + 28) B × 8 / 20 kbit/s = 491 ms + 300 ms + (1200 + 28) B × 8 / 25 kbit/s = 393 ms + 300 ms = **1484 ms**, whatever the payload. A first connection adds a round trip: the client's Initial up, the broker's whole first flight down (certificate chain included), the client's Handshake finish and request up, the response down. ` + "`quiot bench-reconnect`" + ` and ` + "`quiot bench`" + ` compute both floors for each link profile from the datagrams their wake-ups actually sent and received (IP and UDP headers included, as the link emulator counts them) and report TTFD as a multiple of them.
- **The probe hold from the session file** (` + "`handshake_rtt_from_session`" + `, on in lean, off in default). quic-go (v0.65) probes an unanswered handshake after 200 ms, 600 ms, 1.4 s, ... whatever the link, and each probe is another padded 1200-byte datagram ahead of the handshake's own on a slow uplink. A publisher with ` + "`--session-file`" + ` records the smoothed RTT of its connection beside its session ticket when it closes; the next run holds its handshake probes back for 1.5 × that RTT until the broker's first datagram arrives. ` + "`handshake_rtt`" + ` in the profile, when set, takes precedence. A device's very first connection (no session file yet) probes as quic-go does; set ` + "`handshake_rtt`" + ` to the link's RTT if it is known in advance. HTTP/3 and MQTT over QUIC clients both hold.
- **The broker's probe governor** (` + "`probe_governor`" + `, on in lean, off in default). The broker probes an unanswered handshake as quic-go does too (2 × 100 ms before it has an RTT sample), and its padded probes queued on a slow downlink ahead of its own answer: the slow mode of warm wake-ups. A broker with ` + "`probe_governor`" + ` learns, per client IP, the time from its first flight to the client's answer and holds its later Initial and Handshake datagrams to that client for 1.5 × that time: dropped once the client answers, sent if it does not (internal/quicgov; at most 4096 addresses). On nbiot, lean, warm TTFD p90 went from 1.56× to 1.07× the floor over HTTP/3 and from 1.54× to 1.04× over MQTT over QUIC (docs/results/nbiot/README.md); a client's first connection is unchanged.
- **MQTT over QUIC wake-ups** with ` + "`allow_0rtt`" + ` send CONNECT and the first PUBLISH in 0-RTT data (docs/mqtt.md, "0-RTT"): on nbiot, lean, warm TTFD p50 1535 ms (1.03× the floor), p90 2257 ms (1541 ms with the broker's probe governor, above), against 5496 / 6061 ms without 0-RTT and hold and 4083 / 4190 ms with the hold alone (` + "`quiot bench-reconnect --profile nbiot --tuning lean --wakeups 5 --repeat 2 --sleep 1s`" + `, 8 warm wake-ups per variant; docs/results/nbiot/README.md).

`

// writeWakeupSection appends wakeupSection.
func writeWakeupSection(m *md) { m.WriteString(wakeupSection) }
