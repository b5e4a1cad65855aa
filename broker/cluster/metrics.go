package cluster

import (
	"fmt"
	"io"
)

// WritePrometheus writes the link's state and counters in the Prometheus
// text format (quiot_cluster_*); it implements the collector interface of
// broker/promexport, so `quiot broker --metrics-listen` serves them.
func (l *Link) WritePrometheus(w io.Writer) {
	s := l.Stats()
	up := 0
	if s.Connected {
		up = 1
	}
	for _, m := range []struct {
		name, typ, help string
		v               uint64
	}{
		{"up", "gauge", "1 when the cluster link is connected and JetStream ready, else 0 (local delivery goes on).", uint64(up)},
		{"held_messages", "gauge", "Messages held for the cluster, not yet acknowledged by JetStream.", uint64(s.Held)},
		{"held_bytes", "gauge", "Topic and payload bytes of the held messages.", uint64(s.HeldBytes)},
		{"subjects", "gauge", "NATS subscriptions made for local subscribers' filters.", uint64(s.Subjects)},
		{"forwarded_total", "counter", "Messages JetStream acknowledged.", s.Forwarded},
		{"received_total", "counter", "Messages from other brokers handed to this one.", s.Received},
		{"duplicates_total", "counter", "Messages received again and dropped (overlapping filters, resends).", s.Duplicates},
		{"denied_total", "counter", "Messages from other brokers the local ACL refused.", s.Denied},
		{"refused_total", "counter", "Messages from other brokers this broker refused (bad topic, too large, unreadable).", s.Refused},
		{"dropped_total", "counter", "Held messages dropped at the hold bound (announced as a gap).", s.Dropped},
		{"resent_total", "counter", "Messages sent to JetStream again after a missing acknowledgement.", s.Resent},
		{"slow_consumer_total", "counter", "Messages from the cluster dropped because this broker did not take them fast enough (each one beyond the receive bounds; once each time NATS dropped some).", s.SlowConsumer},
		{"remote_gaps_total", "counter", "Gaps other brokers announced (messages they dropped while cut off).", s.RemoteGaps},
		{"reconnects_total", "counter", "Reconnections to NATS.", s.Reconnects},
		{"caught_up_total", "counter", "Messages read from the history stream after a reconnection.", s.CaughtUp},
	} {
		fmt.Fprintf(w, "# HELP quiot_cluster_%s %s\n# TYPE quiot_cluster_%s %s\nquiot_cluster_%s %d\n", m.name, m.help, m.name, m.typ, m.name, m.v)
	}
}
