package wire

// MQTTConnackReason names an MQTT 5 CONNACK failure reason code (MQTT 5.0
// section 3.2.2.2) for logs and errors; "refused" for one it does not name.
func MQTTConnackReason(code byte) string {
	switch code {
	case 0x84:
		return "unsupported protocol version"
	case 0x85:
		return "client identifier not valid"
	case 0x86:
		return "bad user name or password"
	case 0x87:
		return "not authorized"
	case 0x88:
		return "server unavailable"
	case 0x89:
		return "server busy"
	case 0x8A:
		return "banned"
	case 0x8C:
		return "bad authentication method"
	}
	return "refused"
}
