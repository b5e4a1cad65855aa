package bridge

import (
	"fmt"
	"io"
	"strconv"
)

// Collector writes the bridges' state and counters in the Prometheus text
// format (quiot_bridge_*, one series per bridge, label bridge="NAME"); it
// implements the collector interface of broker/promexport, so `quiot
// broker --metrics-listen` serves them. The function returns the running
// bridges at each scrape.
type Collector func() []*Bridge

// WritePrometheus implements promexport.Collector.
func (c Collector) WritePrometheus(w io.Writer) {
	bs := c()
	if len(bs) == 0 {
		return
	}
	stats := make([]Stats, len(bs))
	for i, b := range bs {
		stats[i] = b.Stats()
	}
	for _, m := range []struct {
		name, typ, help string
		v               func(Stats) float64
	}{
		{"up", "gauge", "1 while the bridge is connected to its upstream, else 0.", func(s Stats) float64 {
			if s.Connected {
				return 1
			}
			return 0
		}},
		{"connected_since_seconds", "gauge", "Unix time of the current upstream connection (0 while down).", func(s Stats) float64 {
			if !s.Connected {
				return 0
			}
			return float64(s.ConnectedSince.UnixNano()) / 1e9
		}},
		{"queued_messages", "gauge", "Messages waiting to go up.", func(s Stats) float64 { return float64(s.Queued) }},
		{"queued_bytes", "gauge", "Bytes of the messages waiting to go up in memory (payload, topic and 64 a message).", func(s Stats) float64 { return float64(s.QueuedBytes) }},
		{"stored_messages", "gauge", "Messages waiting to go up in the on-disk store (store_dir; included in queued_messages).", func(s Stats) float64 { return float64(s.Stored) }},
		{"store_bytes", "gauge", "Size of the on-disk store's files.", func(s Stats) float64 { return float64(s.StoreBytes) }},
		{"sent_total", "counter", "Messages the upstream accepted (PUBACK for QoS 1).", func(s Stats) float64 { return float64(s.Sent) }},
		{"dropped_total", "counter", "Messages dropped from a full queue or store (the oldest first) or expired in the store.", func(s Stats) float64 { return float64(s.Dropped) }},
		{"refused_total", "counter", "Messages the upstream refused (PUBACK reason 0x80 or above), not sent again.", func(s Stats) float64 { return float64(s.Refused) }},
		{"received_total", "counter", "Messages brought down and accepted by this broker.", func(s Stats) float64 { return float64(s.In) }},
		{"echoes_total", "counter", "Messages from the upstream dropped as copies of the bridge's own publishes (MQTT 3.1.1 and https:// upstreams, without No Local).", func(s Stats) float64 { return float64(s.Echoes) }},
		{"denied_total", "counter", "Messages from the upstream refused here (ACL, outside prefix or in filters, $ topics, broker errors).", func(s Stats) float64 { return float64(s.InRefused) }},
		{"connects_total", "counter", "Connections made to the upstream.", func(s Stats) float64 { return float64(s.Connects) }},
		{"connect_failures_total", "counter", "Connection attempts that failed.", func(s Stats) float64 { return float64(s.ConnectFailures) }},
	} {
		fmt.Fprintf(w, "# HELP quiot_bridge_%s %s\n# TYPE quiot_bridge_%s %s\n", m.name, m.help, m.name, m.typ)
		for i, b := range bs {
			fmt.Fprintf(w, "quiot_bridge_%s{bridge=%s} %s\n", m.name, strconv.Quote(b.Name()), strconv.FormatFloat(m.v(stats[i]), 'f', -1, 64))
		}
	}
}
