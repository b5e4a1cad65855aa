package broker

import (
	"context"
	"fmt"
)

// PublishOnce publishes m once per message id: within IdemWindow, a
// repeat of (m.Identity, id) is not published again and gets the first
// publish's sequence number with repeat set. It is the MQTT side's way
// into the dedup of HTTP/3's Quiot-Msg-Id (idem.go), so a PUBLISH
// replayed from 0-RTT data, or sent again with the same id after a lost
// connection, over either protocol, is delivered once (docs/pubsub.md,
// "Message ids and 0-RTT").
func (b *Broker) PublishOnce(ctx context.Context, m Message, id string) (seq uint64, repeat bool, err error) {
	if err := validMsgID(id); err != nil {
		return 0, false, fmt.Errorf("%w: %w", errBadMsgID, err)
	}
	seq, repeat, err = b.idem.do(ctx, m.Identity, id, func() (uint64, error) {
		return b.Publish(ctx, m)
	})
	if repeat && err == nil {
		b.log.Debug("repeated message id answered again", "identity", m.Identity, "id", id, "seq", seq, "origin", m.Origin)
	}
	return seq, repeat, err
}
