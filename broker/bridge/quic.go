package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/streamconn"
)

const (
	// mqttALPN is the TLS application protocol of MQTT over QUIC.
	mqttALPN = "mqtt"
	// defaultMQTTQUICPort is the port of an mqtt-quic:// URL without one.
	defaultMQTTQUICPort = "14567"
)

// dialQUIC opens one MQTT connection over QUIC (mqtt-quic://): a QUIC
// connection with the bridge's tuning profile and one bidirectional
// stream carrying the MQTT packets, as device/client and quiot's MQTT
// over QUIC listener speak it. Closing the returned net.Conn closes the
// QUIC connection.
func (br *Bridge) dialQUIC(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	port := u.Port()
	if port == "" {
		port = defaultMQTTQUICPort
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	qconf := br.quic.QUICConfig()
	hctx := ctx
	if qconf.HandshakeIdleTimeout == 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
	}
	qc, err := quic.DialAddr(hctx, addr, br.tlsCfg.Clone(), qconf)
	if err != nil {
		if ctx.Err() == nil && hctx.Err() != nil {
			err = errors.New("no answer over UDP in time")
		}
		return nil, fmt.Errorf("mqtt-quic %s: %w", addr, err)
	}
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(streamconn.CodeNoError, "")
		return nil, fmt.Errorf("mqtt-quic %s: open stream: %w", addr, err)
	}
	return streamconn.New(qc, s, true), nil
}
