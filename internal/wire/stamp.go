package wire

import "strconv"

// MQTTStampProperty is the MQTT 5 user property in which quiot's MQTT
// clients, its bridges and its broker carry a message's send time: Unix
// nanoseconds in base 36 (12 characters until the year 2120). The property
// costs 19 bytes of a PUBLISH where MQTTTimeProperty's 19 decimal digits
// under a 10-byte name cost 34: on a 20 kbit/s uplink, 6 ms a message.
// Readers take either (ParseStamp).
const MQTTStampProperty = "qt"

// FormatStamp is MQTTStampProperty's value for a send time in Unix
// nanoseconds.
func FormatStamp(ns int64) string { return strconv.FormatInt(ns, 36) }

// ParseStamp returns the send time in Unix nanoseconds that a PUBLISH's
// user properties carry; get returns a property's value ("" when absent).
// MQTTStampProperty (base 36) is read first, then MQTTTimeProperty
// (decimal: what quiot sent before the compact form, and what a
// third-party publisher may set). 0 means none: absent, malformed or not
// positive.
func ParseStamp(get func(key string) string) int64 {
	if v := get(MQTTStampProperty); v != "" {
		if ns, err := strconv.ParseInt(v, 36, 64); err == nil && ns > 0 {
			return ns
		}
		return 0
	}
	if v := get(MQTTTimeProperty); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil && ns > 0 {
			return ns
		}
	}
	return 0
}
