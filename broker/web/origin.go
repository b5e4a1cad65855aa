package web

import "net/http"

// OriginCheck returns the check the HTTP side applies to a request's
// Origin header, for the listed origins (the --cors-origins list, as
// ParseOrigins returns it): an allowed origin, or any with "*"; never the
// opaque origin "null" nor an empty one. Other listeners that serve
// browsers (MQTT over WebSocket, broker/mqttquic) use it, so one rule
// decides which web pages may reach the broker.
func OriginCheck(origins []string) (func(origin string) bool, error) {
	p, err := newCORSPolicy(origins)
	if err != nil {
		return nil, err
	}
	return p.allows, nil
}

// SameOrigin reports whether origin is the broker's own for request r
// (https://Host): a page the broker served, such as the dashboard. It is
// the check the HTTP side applies to the session cookie (CSRF), for other
// handlers on the broker's port.
func SameOrigin(origin string, r *http.Request) bool { return sameOrigin(origin, r) }
