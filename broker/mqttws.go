package broker

import (
	"net/http"
	"sync"
)

// MQTT over WebSocket on the broker's own port (docs/mqtt.md): the path
// MQTTWebSocketPath of the TCP listener (HTTP/1.1 upgrade), so a page the
// broker serves (the dashboard) reaches MQTT with no second port or
// certificate. The MQTT server (broker/mqttquic, which imports this
// package) installs the handler with SetMQTTWebSocket.

// MQTTWebSocketPath is the path of MQTT over WebSocket on the broker's port.
const MQTTWebSocketPath = "/mqtt"

// mqttWebSockets holds each broker's MQTT over WebSocket handler
// (*Broker -> http.Handler) while one is installed.
var mqttWebSockets sync.Map

// SetMQTTWebSocket installs h as the handler of MQTTWebSocketPath; nil
// removes it (then the path answers 404). h gets the request after the
// TCP connection limits and the browser part (broker/web); it upgrades it
// and authenticates the MQTT CONNECT itself.
func (b *Broker) SetMQTTWebSocket(h http.Handler) {
	if h == nil {
		mqttWebSockets.Delete(b)
		return
	}
	mqttWebSockets.Store(b, h)
}

// serveMQTTWebSocket serves MQTTWebSocketPath (http.go).
func (b *Broker) serveMQTTWebSocket(w http.ResponseWriter, r *http.Request) {
	h, ok := mqttWebSockets.Load(b)
	if !ok {
		fail(w, http.StatusNotFound, "MQTT over WebSocket is not served on this port (the broker's MQTT server is off)")
		return
	}
	if r.ProtoMajor != 1 {
		fail(w, http.StatusBadRequest, "MQTT over WebSocket needs an HTTP/1.1 upgrade on the TCP port (this request is %s)", r.Proto)
		return
	}
	h.(http.Handler).ServeHTTP(w, r)
}
