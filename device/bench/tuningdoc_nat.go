package bench

// natMigrationSection closes TUNING.md: keep-alive against carrier NAT
// timeouts and what a device sees when its NAT mapping or its address
// changes. It is not measured by the study (every run lasts seconds, on one
// address) but by the NAT lab test in device/client (TestMigrationBehindNAT,
// run as root in `make test`), so it is written as it stands.
const natMigrationSection = `## NAT bindings and connection migration

Not measured by this study (each run lasts seconds, on one address) but in a NAT lab: ` + "`TestMigrationBehindNAT`" + ` in device/client (run as root in ` + "`make test`" + `) puts a publisher and a subscriber in a network namespace behind an nftables masquerade router, the broker beyond it, and sends 20 messages a second through it over HTTP/3 and over MQTT over QUIC.

What a device sees (quic-go v0.65 on both ends):

- **NAT rebinding** (the carrier's NAT dropped the mapping, or restarted, and the device's next datagram leaves from a new public port): the QUIC connection stays, over both protocols: no reconnect, no message lost, none duplicated. The broker sees the connection's packets come from a new address, validates it (PATH_CHALLENGE / PATH_RESPONSE, one round trip) and moves the connection there.
- **A new device address, added before the old one goes** (handover, Wi-Fi to cellular): the connection stays too. The client's socket is not bound to an address, so the kernel sends from the address the device has now. On Linux the client also watches the addresses and routes of its network namespace (rtnetlink) and, when its source address towards the broker changes, probes the broker from the new address at once: quic-go's ` + "`Conn.AddPath`" + ` on the same socket and ` + "`Path.Probe`" + ` (a PATH_CHALLENGE under a new connection ID); it logs "local address changed". The broker validates the new address and moves the connection at the client's next packet, its acknowledgement of the answer, without waiting for the device's own next datagram, which matters for a device that only receives (below). The client does not call ` + "`Path.Switch`" + `: in quic-go v0.65 it replaces the connection's socket without synchronisation against ` + "`Conn.RemoteAddr`, `LocalAddr` and `ConnectionState`" + `, which quic-go's HTTP/3 client reads on every request (the race detector finds it), and it is not needed on an unbound socket. quic-go's server answers a PATH_CHALLENGE only when it comes from an address other than the connection's current one, so a probe sent after the broker has already moved (the device sent something first) goes unanswered; the client drops that path after max(1 s, 4 RTT) and the connection stays where it is. Elsewhere than Linux there is no watch and the broker follows at the device's next datagram.
- **The old address goes before the new one comes** (break before make): for a moment sends fail ("network is unreachable"). quic-go closes a connection on any such write error; quiot's client counts them as lost datagrams once a connection is up (it logs "network down" and "network back"), so loss recovery resends from the new address. Before quiot did this, it cost a reconnect.
- **A device that only receives** (a subscriber) is reachable only through the mapping its own last datagram made. After a NAT rebinding in mid-stream it sends nothing until its next acknowledgement or keep-alive, and hears nothing until then: the broker's messages wait (QoS 1 is retransmitted, nothing is lost). quic-go sends the keep-alive PING min(keep_alive_period, idle timeout / 2) after the last packet received, the idle timeout being the smaller of the two ends' (the broker's default is 30 s). In the lab, lean (25 s) against a default broker heard again after 13–15 s (a PING 15 s after the last packet), or at once when an acknowledgement of its own was still due; after an address change, with the address watch, at once (without it, 13–15 s in some runs). A publisher recovers with its next message.

Keep-alive against carrier NATs:

- RFC 4787 (REQ-5) asks NATs to keep an idle UDP mapping for at least 2 minutes, but carrier and home NATs often expire idle UDP mappings after 30–120 s, some after 30 s. A device that must stay reachable while idle (a subscriber) needs a keep-alive shorter than the shortest expiry on its path: **lean's 25 s** (below 30 s; with a broker's 30 s idle timeout quic-go pings every 15 s). Each keep-alive is a PING and its acknowledgement, a few tens of bytes each way, and wakes the radio.
- A device that sleeps between publishes (PSM/eDRX) should not keep alive at all: set ` + "`keep_alive_period = \"0s\"`" + ` and let each wake-up resume the session (0-RTT over HTTP/3) instead of holding a mapping open.
- The default profile (quic-go's configuration) has no keep-alive. An HTTP/3 subscriber is still heard every 15 s, because it acknowledges the broker's heartbeat (15 s by default), and the MQTT client sends PINGREQ every two thirds of the idle timeout (20 s); an idle HTTP/3 publisher ends at quic-go's 30 s idle timeout and connects again (with 0-RTT when allowed) at its next message.
`

// writeNATSection appends natMigrationSection.
func writeNATSection(m *md) { m.WriteString(natMigrationSection) }
