package mqttquic

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
)

// TestSecurityMetrics: the MQTT server's refusal counters reach
// Prometheus: a connection beyond --mqtt-max-preconnect-per-addr is
// counted in quiot_mqtt_refused_preconnect_total and in
// quiot_broker_refused_total{proto="mqtt",reason="too_many"}, and every
// quiot_mqtt_* family is written.
func TestSecurityMetrics(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) {
		o.Limits.ConnectTimeout = time.Hour
		o.Limits.MaxPreConnectPerAddr = 1
	})
	silent(t, b.mqtt, b.pki, "tcp")
	waitForCond(t, func() bool { return b.mqtt.compat.pre.held() == 1 }, "one connection without CONNECT counted")
	if c, err := silentErr(t, b.mqtt, b.pki, "tcp"); err == nil {
		waitClosed(t, c)
	}
	var out bytes.Buffer
	b.mqtt.WritePrometheus(&out)
	for _, want := range []string{
		"# TYPE quiot_mqtt_refused_preconnect_total counter\nquiot_mqtt_refused_preconnect_total 1\n",
		"quiot_mqtt_closed_no_connect_total 0\n", "quiot_mqtt_refused_wills_total 0\n", "quiot_mqtt_refused_client_ids_total 0\n",
		"quiot_mqtt_dropped_queue_full_total 0\n", "# TYPE quiot_mqtt_queued_bytes gauge\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, out.String())
		}
	}
	if n := b.h3.Broker.Stats().Protocols[Origin].Refused[broker.ReasonTooMany.String()]; n != 1 {
		t.Errorf("refused_total{proto=mqtt,reason=too_many} = %d, want 1", n)
	}
}
