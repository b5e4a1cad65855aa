package client

import (
	"io"
	"time"

	"github.com/quiot/quiot/internal/wire"
)

// maxSubscribeFrame bounds one frame a subscriber accepts: far above the
// broker's default payload limit (256 KiB), so a broker configured for larger
// payloads still works, while a corrupt length cannot make the client
// allocate without bound.
const maxSubscribeFrame = 16<<20 + 1024

// frameMessage turns a message or gap frame into a Message received at now.
func frameMessage(f *wire.Frame, now time.Time) (Message, error) {
	if f.IsGap() {
		g, err := f.Gap()
		if err != nil {
			return Message{}, err
		}
		m := Message{Topic: g.Topic, Gap: true, Received: now}
		if g.To > 0 {
			m.Seq = g.To + 1 // Message.Seq of a gap: the first sequence after it
		}
		return m, nil
	}
	m := Message{
		Topic:    f.Topic,
		Seq:      f.Seq,
		Received: now,
		Payload:  f.Payload,
		Retained: f.Retained(),
		Replayed: f.Replayed(),
	}
	if f.Time != 0 {
		m.Sent = time.Unix(0, f.Time)
	}
	return m, nil
}

// readMessages decodes message frames from r and passes each to fn;
// heartbeat frames are skipped (wire.Decoder.Frame), never delivered. Before
// the gap that announces a broker restart (wire.Gap.Restarted) it calls
// restarted. It returns nil at a clean end of the stream.
func readMessages(r io.Reader, restarted func(), fn func(Message)) error {
	dec := wire.NewDecoder(r, maxSubscribeFrame)
	for {
		f, err := dec.Frame()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		m, err := frameMessage(&f, time.Now())
		if err != nil {
			return err
		}
		if f.IsGap() {
			if g, _ := f.Gap(); g.Restarted() {
				restarted()
			}
		}
		fn(m)
	}
}
