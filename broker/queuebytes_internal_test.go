package broker

import "testing"

// TestQueueBytesDefaults: the byte bounds default to those of MQTT
// sessions and always fit one message of MaxPayload.
func TestQueueBytesDefaults(t *testing.T) {
	for _, tc := range []struct {
		in         Limits
		per, total int64
	}{
		{Limits{}, 4 << 20, 64 << 20},
		{Limits{QueueBytes: 1 << 20, QueueBytesTotal: 8 << 20}, 1 << 20, 8 << 20},
		{Limits{QueueBytes: 10, MaxPayload: 1000, MaxTopicLength: 100}, 1100 + entryOverhead, 64 << 20},
	} {
		o := (&Options{Limits: tc.in}).ensureDefaults()
		if o.Limits.QueueBytes != tc.per || o.Limits.QueueBytesTotal != tc.total {
			t.Errorf("%+v: QueueBytes %d, QueueBytesTotal %d; want %d, %d", tc.in, o.Limits.QueueBytes, o.Limits.QueueBytesTotal, tc.per, tc.total)
		}
	}
}
