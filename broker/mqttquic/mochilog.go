package mqttquic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// quietHandler fits mochi's log records to quiot's levels: what a client
// does (connecting, leaving, a malformed packet, a refused publish) is
// Debug or Info, never a warning or an error, and every record has a
// message. mochi's Info records (hooks added, listeners attached, every
// client connecting) become Debug; packet attributes become a one-line
// summary instead of the whole packet with its payload.
type quietHandler struct{ slog.Handler }

// Enabled reports whether records at level l might be logged (the level
// of a rewritten record is decided in Handle).
func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug) || h.Handler.Enabled(ctx, l)
}

// Handle logs r with its level and message rewritten.
func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	r = rewriteRecord(r)
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the rewriting on derived handlers.
func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

// WithGroup keeps the rewriting on derived handlers.
func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}

// mochiClientRecords are mochi's records about a client's doing, with the
// message and level quiot logs them at.
var mochiClientRecords = map[string]struct {
	msg   string
	level slog.Level
}{
	// processPacket failed: the client sent a packet MQTT does not allow.
	"error processing packet": {"mqtt client sent a packet that breaks the protocol", slog.LevelInfo},
	// A hook returned an error for a publish (quiot's hooks answer
	// refusals themselves, see answerRefusal).
	"publish packet error":    {"mqtt publish refused", slog.LevelInfo},
	"publish packet rejected": {"mqtt publish refused", slog.LevelDebug},
	"packet rejected":         {"mqtt packet refused", slog.LevelDebug},
	// A client chose a keep-alive mochi finds short (it is allowed).
	mqtt.ErrMinimumKeepalive.Error(): {"mqtt client keep-alive is short", slog.LevelDebug},
}

// rewriteRecord returns r with quiot's level and message and without
// whole packets.
func rewriteRecord(r slog.Record) slog.Record {
	level, msg := r.Level, r.Message
	if level == slog.LevelInfo {
		level = slog.LevelDebug
	}
	var errv error
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			errv, _ = a.Value.Any().(error)
		}
		return true
	})
	var code packets.Code
	if m, ok := mochiClientRecords[msg]; ok {
		level, msg = m.level, m.msg
		if errors.As(errv, &code) && code.Code == packets.ErrNotAuthorized.Code {
			// An MQTT 3.1.1 client is disconnected for a publish the ACL
			// denies: a refusal the auth hook logged ("mqtt publish
			// refused"), not a broken protocol.
			level, msg = slog.LevelDebug, "mqtt client disconnected after a refusal"
		}
	} else if msg == "" {
		// mochi's TCP listener logs the end of every connection as a
		// warning without a message.
		level, msg = connEndLevel(errv), "mqtt connection ended"
	}
	out := slog.NewRecord(r.Time, level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if pk, ok := a.Value.Any().(packets.Packet); ok {
			a = slog.String(a.Key, packetSummary(pk))
		}
		out.AddAttrs(a)
		return true
	})
	return out
}

// connEndLevel is Debug for a connection that ended as connections do (the
// client left, the server closed it), Info for one that ended in an error
// the client caused (a malformed packet, refused credentials, keep-alive
// expired).
func connEndLevel(err error) slog.Level {
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, mqtt.ErrConnectionClosed):
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// packetSummary describes pk in one line without its payload.
func packetSummary(pk packets.Packet) string {
	s := fmt.Sprintf("type=%d qos=%d id=%d", pk.FixedHeader.Type, pk.FixedHeader.Qos, pk.PacketID)
	if pk.FixedHeader.Type == packets.Publish {
		s += fmt.Sprintf(" topic=%q payload_bytes=%d", pk.TopicName, len(pk.Payload))
	}
	return s
}
