package mqttquic

import (
	"net"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// hostAddress returns an IPv4 address of this host that is not a loopback
// one (a client dialling it from this host connects from it), or skips the
// test saying why.
func hostAddress(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skipf("skipped: no non-loopback address to connect from: %v", err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
				continue
			}
			return n.IP.String()
		}
	}
	t.Skip("skipped: this host has no non-loopback IPv4 address to connect from")
	return ""
}

// TestNoACLLoopbackOnlyEveryTransport: a broker without an ACL (the
// default, auth.LoopbackOnly) serves loopback clients only on every MQTT
// path: a client connecting from one of the host's own non-loopback
// addresses gets CONNACK Not authorized (MQTT 5 0x87, 3.1.1 return code
// 5) over QUIC, TCP, TLS, ws, wss and WebSocket on the broker's port,
// while the same listeners serve a client from 127.0.0.1
// (docs/security.md, deny by default).
func TestNoACLLoopbackOnlyEveryTransport(t *testing.T) {
	host := hostAddress(t)
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Listen: "0.0.0.0:0", ClientCAs: p.Pool()})
	if !h3.Broker.Auth().LoopbackOnlyMode() {
		t.Fatal("a broker without an ACL is not in loopback-only mode")
	}
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.QUICAddr = "0.0.0.0:0"
		o.TCPAddr = "0.0.0.0:0"
		o.TLSAddr = "0.0.0.0:0"
		o.WSAddr = "0.0.0.0:0"
		o.WSSAddr = "0.0.0.0:0"
		o.WSOnBroker = true
	})
	for _, tr := range pathTransports {
		t.Run(tr, func(t *testing.T) {
			for _, v := range []byte{5, 4} {
				id := "remote-" + tr + string('0'+v)
				_, code := pathConnect(t, s, h3.Broker, p, tr, pathOpts{host: host}, connectOpts{version: v, id: id, clean: true})
				want := packets.ErrNotAuthorized.Code
				if v == 4 {
					want = packets.Err3NotAuthorized.Code
				}
				if code != want {
					t.Errorf("v%d from %s: CONNACK 0x%02x, want 0x%02x (not authorized)", v, host, code, want)
				}
			}
			c := mustPathConnect(t, s, h3.Broker, p, tr, pathOpts{host: "127.0.0.1"}, connectOpts{id: "local-" + tr, clean: true})
			if code, err := c.publish("t/"+tr, "x", 1, false); err != nil || code != 0 {
				t.Errorf("publish from loopback: 0x%02x %v", code, err)
			}
		})
	}
}
