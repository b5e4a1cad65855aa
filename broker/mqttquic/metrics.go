package mqttquic

import (
	"fmt"
	"io"
	"strconv"
)

// WritePrometheus writes the server's security counters and holdings
// (Security) in the Prometheus text format, as quiot_mqtt_* families; it
// implements the collector interface of broker/promexport, so `quiot broker
// --metrics-listen` serves them. Refusals are also counted by reason in
// quiot_broker_refused_total{proto="mqtt"}; these families name the bound
// that refused or dropped (docs/security.md, Bounds).
func (s *Server) WritePrometheus(w io.Writer) {
	st := s.Security()
	for _, m := range []struct {
		name, typ, help string
		v               int64
	}{
		{"refused_clients_total", "counter", "CONNECTs refused because --mqtt-max-clients clients were connected (CONNACK Quota exceeded).", int64(st.RefusedClients)},
		{"refused_sessions_total", "counter", "CONNECTs refused by --mqtt-max-sessions or --mqtt-max-sessions-per-identity (CONNACK Quota exceeded).", int64(st.RefusedSessions)},
		{"refused_takeovers_total", "counter", "CONNECTs refused because the client id's session belongs to another identity (CONNACK Not authorized).", int64(st.RefusedTakeovers)},
		{"refused_client_ids_total", "counter", "CONNECTs refused because the client id is the name of another identity (CONNACK Client Identifier not valid).", int64(st.RefusedClientIDs)},
		{"refused_wills_total", "counter", "CONNECTs refused for their will: topic not allowed or beyond --max-topic-bytes/--max-topic-levels.", int64(st.RefusedWills)},
		{"refused_preconnect_total", "counter", "Connections closed at once because their address held --mqtt-max-preconnect-per-addr connections without CONNECT.", int64(st.RefusedPreConnect)},
		{"closed_no_connect_total", "counter", "Connections closed because they sent no CONNECT within --mqtt-connect-timeout.", int64(st.ClosedNoConnect)},
		{"quic_retries_total", "counter", "MQTT-over-QUIC connection attempts asked to prove their source address with a Retry (--quic-retry-above).", int64(st.QUICRetries)},
		{"quic_half_open", "gauge", "MQTT-over-QUIC handshakes in progress from addresses not yet validated.", st.QUICHalfOpen},
		{"dropped_wills_total", "counter", "Wills not sent because the identity could no longer publish to the topic when they were due (a retained will beyond the retained bytes counts in quiot_broker_refused_total{reason=\"storage_full\"}).", int64(st.DroppedWills)},
		{"dropped_resends_total", "counter", "Queued messages of an inherited session not resent because the identity may no longer receive them.", int64(st.DroppedResends)},
		{"dropped_queue_full_total", "counter", "Deliveries not queued because --mqtt-max-queued-bytes or --mqtt-max-queued-bytes-total was reached.", int64(st.DroppedQueueFull)},
		{"dropped_inflight_total", "counter", "Deliveries not queued because a session held --mqtt-max-queued-messages.", int64(st.DroppedInflight)},
		{"expired_sessions_total", "counter", "Anonymous offline sessions ended by --mqtt-anonymous-session-expiry.", int64(st.ExpiredSessions)},
		{"bridge_dropped_full_total", "counter", "HTTP messages not delivered to MQTT clients because the bridge queue was full.", int64(st.BridgeDroppedFull)},
		{"bridge_dropped_denied_total", "counter", "HTTP messages not delivered to MQTT clients: a $ topic, or a publisher not allowed there.", int64(st.BridgeDroppedDenied)},
		{"clients", "gauge", "Connected MQTT clients.", st.Clients},
		{"sessions", "gauge", "MQTT sessions of identified clients, connected and offline.", int64(st.Sessions)},
		{"queued_bytes", "gauge", "Bytes of the messages all MQTT sessions hold.", st.QueuedBytes},
		{"bridge_queue_bytes", "gauge", "Bytes of HTTP messages waiting to be delivered to MQTT clients.", st.BridgeQueueBytes},
		{"pending_write_bytes", "gauge", "Bytes of the QoS 0 messages waiting to be written to MQTT clients.", st.PendingWriteBytes},
		{"retained_replays", "gauge", "MQTT clients with a retained replay under way after a SUBSCRIBE (paced by the client's acknowledgements and write queue).", st.RetainedReplays},
		{"dropped_pending_bytes_total", "counter", "QoS 0 deliveries dropped because --mqtt-max-queued-bytes (per client) or --mqtt-max-queued-bytes-total of them were waiting to be written.", int64(st.DroppedPendingBytes)},
	} {
		fmt.Fprintf(w, "# HELP quiot_mqtt_%s %s\n# TYPE quiot_mqtt_%s %s\nquiot_mqtt_%s %s\n", m.name, m.help, m.name, m.typ, m.name, strconv.FormatInt(m.v, 10))
	}
}
