package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/probehold"
	"github.com/quiot/quiot/internal/streamconn"
	"github.com/quiot/quiot/internal/tlssession"
)

const (
	// mqttALPN is the TLS application protocol of MQTT over QUIC.
	mqttALPN = "mqtt"
	// defaultMQTTQUICPort is the port of an mqtt-quic:// URL without one.
	defaultMQTTQUICPort = "14567"
)

// handshakeHold is the round trip the next MQTT over QUIC dial expects
// (0: none, quic-go's own probing): the profile's handshake_rtt, else,
// with handshake_rtt_from_session (lean), the smoothed RTT of the
// bridge's last connection. Its handshake probes are held for 1.5 x it
// (internal/probehold).
func (br *Bridge) handshakeHold() time.Duration {
	if rtt := time.Duration(br.quic.HandshakeRTT); rtt > 0 {
		return rtt
	}
	if br.quic.HandshakeRTTFromSession {
		return time.Duration(br.quicRTT.Load())
	}
	return 0
}

// dialQUIC opens one MQTT connection over QUIC (mqtt-quic://): a QUIC
// connection with the bridge's tuning profile and one bidirectional
// stream carrying the MQTT packets, as device/client and quiot's MQTT
// over QUIC listener speak it. Closing the returned net.Conn closes the
// QUIC connection.
func (br *Bridge) dialQUIC(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	addr := quicAddr(u)
	qconf := br.quic.QUICConfig()
	qconf.TokenStore = br.tokens
	hctx := ctx
	if qconf.HandshakeIdleTimeout == 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("mqtt-quic %s: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, fmt.Errorf("mqtt-quic %s: %w", addr, err)
	}
	var pc net.PacketConn = udp
	if hold := br.handshakeHold(); hold > 0 {
		pc = probehold.NewWithOptions(udp, hold*3/2, probehold.Options{FirstFlightCopies: br.quic.FirstFlightCopies})
	}
	qc, err := quic.Dial(hctx, pc, ua, br.tlsCfg.Clone(), qconf)
	if err != nil {
		_ = udp.Close()
		if ctx.Err() == nil && hctx.Err() != nil {
			err = errors.New("no answer over UDP in time")
		}
		return nil, fmt.Errorf("mqtt-quic %s: %w", addr, err)
	}
	// The socket is the connection's alone: closed with it, once its
	// round trip is noted for the next dial's hold.
	br.noteResumed(qc)
	// The round trip is noted once the handshake is done (a broker killed
	// later still finds it in the store) and again when the connection
	// ends, for the next dial's hold.
	noteRTT := func() {
		if rtt := qc.ConnectionStats().SmoothedRTT; rtt > 0 {
			br.quicRTT.Store(int64(rtt))
			// Not once the bridge is closing: its store directory is
			// no longer its own (a test's cleanup removes it, another
			// bridge may open it).
			if m, ok := br.tlsCfg.ClientSessionCache.(tlssession.RTTMemory); ok && !br.closed.Load() {
				m.SetLastRTT(addr, rtt)
			}
		}
	}
	noteRTT()
	context.AfterFunc(qc.Context(), func() {
		noteRTT()
		_ = udp.Close()
	})
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(streamconn.CodeNoError, "")
		return nil, fmt.Errorf("mqtt-quic %s: open stream: %w", addr, err)
	}
	return streamconn.New(qc, s, true), nil
}

// sessionFileName is the file in the store directory that keeps the
// bridge's TLS session and last RTT (internal/tlssession).
const sessionFileName = "tls-session.json"

// quicAddr is the upstream's host:port for MQTT over QUIC and HTTP/3:
// u's port, else the scheme's default.
func quicAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = defaultMQTTQUICPort
		if strings.EqualFold(u.Scheme, "https") {
			port = defaultHTTPSPort
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// noteResumed counts and logs a connection that resumed a TLS session.
func (br *Bridge) noteResumed(qc *quic.Conn) {
	if st := qc.ConnectionState(); st.TLS.DidResume {
		br.resumed.Add(1)
		br.log.Debug("bridge dial resumed the TLS session", "url", br.cfg.URL, "used_0rtt", st.Used0RTT)
	}
}
