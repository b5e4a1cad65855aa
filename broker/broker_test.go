package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

func TestDeliveryInOrder(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			b := brokertest.Start(t, nil, nil)
			c := newClient(t, b, nil)
			s := c.mustSubscribe("a/b", "", sse)
			var seqs []uint64
			for i := range 50 {
				seqs = append(seqs, c.mustPublish("a/b", fmt.Sprint("m", i), "qos=0"))
			}
			for i := range 50 {
				f := s.mustNext()
				if f.Seq != seqs[i] || string(f.Payload) != fmt.Sprint("m", i) || f.Topic != "a/b" {
					t.Fatalf("message %d: got %+v, want seq %d", i, f, seqs[i])
				}
				if i > 0 && seqs[i] <= seqs[i-1] {
					t.Fatalf("sequence numbers not increasing: %v", seqs)
				}
			}
		})
	}
}

func TestPublishTime(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	s := c.mustSubscribe("t", "", false)
	st, _, body := c.publish("t", []byte("x"), "", "Quiot-Time", "1700000000000000001")
	if st != http.StatusNoContent {
		t.Fatalf("status %d: %s", st, body)
	}
	if f := s.mustNext(); f.Time != 1700000000000000001 {
		t.Fatalf("time %d", f.Time)
	}
}

func TestWildcards(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	filters := []string{"a/+", "a/#", "#", "+/b", "$SYS/#", "+/+"}
	subs := map[string]*sub{}
	for _, f := range filters {
		subs[f] = c.mustSubscribe(f, "", false)
	}
	// $SYS/x is the broker's own (no client publishes to a $ topic,
	// docs/security.md); a/b last: it matches every filter except $SYS/#.
	if _, err := b.Publish(context.Background(), broker.Message{Topic: "$SYS/x", Payload: []byte("$SYS/x"), QoS: 1, Origin: broker.ProtoH3}); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"b", "a/b/c", "a", "a/b"} {
		c.mustPublish(tp, tp)
	}
	want := map[string][]string{
		"a/+":    {"a/b"},
		"a/#":    {"a/b/c", "a", "a/b"},
		"#":      {"b", "a/b/c", "a", "a/b"},
		"+/b":    {"a/b"},
		"$SYS/#": {"$SYS/x"},
		"+/+":    {"a/b"},
	}
	for f, topics := range want {
		t.Run(f, func(t *testing.T) {
			var pairs []string
			for _, tp := range topics {
				pairs = append(pairs, tp, tp)
			}
			subs[f].t = t
			subs[f].expect(pairs...)
		})
	}
}

func TestRetainedFirst(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			b := brokertest.Start(t, nil, nil)
			c := newClient(t, b, nil)
			c.mustPublish("r/1", "old", "retain=1")
			c.mustPublish("r/1", "one", "retain=1")
			c.mustPublish("r/2", "two", "retain=1")
			c.mustPublish("r/3", "not retained")
			s := c.mustSubscribe("r/#", "", sse)
			for _, f := range s.expect("r/1", "one", "r/2", "two") {
				if !f.Retained() {
					t.Fatalf("%+v not flagged retained", f)
				}
			}
			c.mustPublish("r/3", "live")
			if f := s.expect("r/3", "live")[0]; f.Retained() {
				t.Fatal("live message flagged retained")
			}
			// An empty retained payload clears the retained message.
			c.mustPublish("r/1", "", "retain=1")
			s.expect("r/1", "")
			s2 := c.mustSubscribe("r/#", "", sse)
			s2.expect("r/2", "two")
			c.mustPublish("r/9", "live")
			s2.expect("r/9", "live")
		})
	}
}

func TestQoS1AckAfterAcceptance(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	seq := c.mustPublish("q/1", "hello", "qos=1")
	// Acknowledged means accepted: it is in the history already.
	s := c.mustSubscribe("q/1", fmt.Sprintf("since=%d", seq-1), false)
	if f := s.mustNext(); f.Seq != seq || string(f.Payload) != "hello" {
		t.Fatalf("got %+v", f)
	}
	if st := b.Stats(); st.Protocols["h3"].MessagesIn != 1 || st.LastSeq != seq {
		t.Fatalf("stats %+v", st)
	}
}

func TestResume(t *testing.T) {
	for _, tc := range []struct {
		name string
		sse  bool
	}{{"since", false}, {"last-event-id", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t, nil, nil)
			c := newClient(t, b, nil)
			s := c.mustSubscribe("res/#", "", tc.sse)
			c.mustPublish("res/a", "1")
			c.mustPublish("res/b", "2")
			last := s.expect("res/a", "1", "res/b", "2")[1].Seq
			s.close()
			c.mustPublish("res/a", "3")
			c.mustPublish("other", "x")
			c.mustPublish("res/b", "4")
			var s2 *sub
			if tc.sse {
				var st int
				var body string
				s2, st, body = c.subscribe("res/#", "", true, "Last-Event-ID", fmt.Sprint(last))
				if st != http.StatusOK {
					t.Fatalf("%d %s", st, body)
				}
			} else {
				s2 = c.mustSubscribe("res/#", fmt.Sprintf("since=%d", last), false)
			}
			s2.expect("res/a", "3", "res/b", "4")
			c.mustPublish("res/a", "5")
			s2.expect("res/a", "5")
		})
	}
}

func TestGapSignal(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{HistoryPerTopic: 5}})
			c := newClient(t, b, nil)
			var seqs []uint64
			for i := range 20 {
				seqs = append(seqs, c.mustPublish("g", fmt.Sprint(i)))
			}
			s := c.mustSubscribe("g", fmt.Sprintf("since=%d", seqs[0]), sse)
			f := s.mustNext()
			g, err := f.Gap()
			if err != nil {
				t.Fatalf("first frame %+v is not a gap: %v", f, err)
			}
			if g.Topic != "g" || g.From != seqs[0]+1 || g.To != seqs[14] {
				t.Fatalf("gap %+v, want g %d..%d", g, seqs[0]+1, seqs[14])
			}
			for i := 15; i < 20; i++ {
				s.expect("g", fmt.Sprint(i))
			}
		})
	}
}

func TestGapAfterBrokerRestart(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	c.mustPublish("x", "1")
	s := c.mustSubscribe("x", "since=1000", false)
	gf := s.mustNext()
	g, err := gf.Gap()
	if err != nil || g.From != 1001 || g.To != 0 {
		t.Fatalf("gap %+v %v", g, err)
	}
	s.expect("x", "1")
}

func TestStreamedPublish(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxPayload: 100}})
	c := newClient(t, b, nil)
	s := c.mustSubscribe("st/#", "", false)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/publish", pr)
	req.Header.Set("Content-Type", wire.ContentType)
	respc := make(chan *http.Response, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := c.c.Do(req)
		if err != nil {
			errc <- err
			return
		}
		respc <- resp
	}()
	write := func(p wire.Publish) {
		if _, err := pw.Write(wire.AppendPublish(nil, &p)); err != nil {
			t.Fatal(err)
		}
	}
	write(wire.Publish{ID: 1, Flags: wire.PubQoS1, Topic: "st/a", Payload: []byte("one"), Time: 5})
	var resp *http.Response
	select {
	case resp = <-respc:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no response headers")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wire.ContentType {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	dec := wire.NewDecoder(resp.Body, 0)
	a, err := dec.Ack()
	if err != nil || a.ID != 1 || a.Status != 0 || a.Seq == 0 {
		t.Fatalf("ack %+v %v", a, err)
	}
	write(wire.Publish{ID: 2, Topic: "st/b", Payload: []byte("two")}) // QoS 0: no ack
	write(wire.Publish{ID: 3, Flags: wire.PubQoS1, Topic: "st/+/bad", Payload: []byte("x")})
	write(wire.Publish{ID: 4, Topic: "st/c", Payload: bytes.Repeat([]byte("x"), 101)})
	write(wire.Publish{ID: 5, Flags: wire.PubQoS1 | wire.PubRetain, Topic: "st/d", Payload: []byte("five")})
	for _, want := range []struct {
		id     uint64
		status uint64
	}{{3, 400}, {4, 413}, {5, 0}} {
		a, err := dec.Ack()
		if err != nil || a.ID != want.id || a.Status != want.status || (a.Status != 0) == (a.Reason == "") {
			t.Fatalf("ack %+v %v, want id %d status %d", a, err, want.id, want.status)
		}
	}
	pw.Close()
	if _, err := dec.Ack(); err != io.EOF {
		t.Fatalf("after end of request: %v", err)
	}
	f := s.expect("st/a", "one", "st/b", "two", "st/d", "five")
	if f[0].Time != 5 {
		t.Fatalf("time %d", f[0].Time)
	}
	// The streamed retain flag made st/d retained.
	s2 := c.mustSubscribe("st/d", "", false)
	if f := s2.mustNext(); !f.Retained() {
		t.Fatalf("%+v not retained", f)
	}
}

func TestErrorStatuses(t *testing.T) {
	acl, err := auth.Parse([]byte(`
[anonymous]
publish = ["pub/#"]
subscribe = ["pub/#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Limits: broker.Limits{MaxPayload: 10, MaxSubscriptionsPerConn: 1, MaxTopicLevels: 4}})
	c := newClient(t, b, nil)
	pubTests := []struct {
		name, topic, query string
		payload            string
		want               int
	}{
		{"ok", "pub/a", "", "x", 204},
		{"empty level", "pub//a", "", "x", 204},
		{"trailing slash", "pub/a/", "", "x", 204},
		{"wildcard", "pub/+", "", "x", 400},
		{"hash", "pub/#", "", "x", 400},
		{"nul", "pub/a\x00", "", "x", 400},
		{"too deep", "pub/a/b/c/d", "", "x", 400},
		{"too long", "pub/" + strings.Repeat("x", 300), "", "x", 400},
		{"bad qos", "pub/a", "qos=2", "x", 400},
		{"bad retain", "pub/a", "retain=maybe", "x", 400},
		{"too large", "pub/a", "", "12345678901", 413},
		{"denied", "private/a", "", "x", 403},
	}
	for _, tt := range pubTests {
		t.Run("publish "+tt.name, func(t *testing.T) {
			st, _, body := c.publish(tt.topic, []byte(tt.payload), tt.query)
			if st != tt.want {
				t.Fatalf("status %d, want %d (%q)", st, tt.want, body)
			}
			if st != 204 && (body == "" || strings.Count(body, "\n") != 1) {
				t.Fatalf("reason %q is not one line", body)
			}
		})
	}
	t.Run("publish bad time", func(t *testing.T) {
		if st, _, _ := c.publish("pub/a", nil, "", "Quiot-Time", "noon"); st != 400 {
			t.Fatalf("status %d", st)
		}
	})
	subTests := []struct {
		name, filter, query string
		want                int
	}{
		{"hash not last", "pub/#/a", "", 400},
		{"hash inside level", "pub/a#", "", 400},
		{"bad since", "pub/#", "since=x", 400},
		{"bad epoch", "pub/#", "since=1&epoch=xyz", 400},
		{"zero epoch", "pub/#", "since=1&epoch=0", 400},
		{"epoch without since", "pub/#", "epoch=abc", 400},
		{"bad epoch in since", "pub/#", "since=xyz-1", 400},
		{"epochs disagree", "pub/#", "since=abc-1&epoch=abd", 400},
		{"bad count", "pub/#", "count=0", 400},
		{"denied", "#", "", 403},
		{"denied dollar", "$SYS/#", "", 403},
	}
	for _, tt := range subTests {
		t.Run("subscribe "+tt.name, func(t *testing.T) {
			_, st, body := c.subscribe(tt.filter, tt.query, false)
			if st != tt.want || body == "" {
				t.Fatalf("status %d, want %d (%q)", st, tt.want, body)
			}
		})
	}
	t.Run("too many subscriptions", func(t *testing.T) {
		c.mustSubscribe("pub/1", "", false)
		_, st, body := c.subscribe("pub/2", "", false)
		if st != http.StatusTooManyRequests {
			t.Fatalf("status %d (%q)", st, body)
		}
	})
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/nope", 404},
		{http.MethodDelete, "/v1/topics/pub/a", 405},
		{http.MethodGet, "/v1/publish", 405},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, b.URL+tt.path, nil)
			resp, err := c.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	t.Run("stream wrong content type", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/publish", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

const aclFile = `
[[user]]
name = "sensor-1"
token = "tok-sensor"
password = "pw"
publish = ["sensors/%u/#"]
subscribe = ["cmd/%u/#"]

[[user]]
name = "admin"
token = "tok-admin"
publish = ["#"]
subscribe = ["#"]
`

func TestAuthAndACL(t *testing.T) {
	acl, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl})

	anon := newClient(t, b, nil)
	if st, _, body := anon.publish("sensors/sensor-1/t", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("anonymous publish: %d %s", st, body)
	}
	if _, st, _ := anon.subscribe("cmd/sensor-1/#", "", false); st != http.StatusUnauthorized {
		t.Fatalf("anonymous subscribe: %d", st)
	}
	bad := newClient(t, b, nil)
	bad.hdr.Set("Authorization", "Bearer wrong")
	if st, _, _ := bad.publish("sensors/sensor-1/t", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("bad token: %d", st)
	}

	sensor := newClient(t, b, nil)
	sensor.hdr.Set("Authorization", "Bearer tok-sensor")
	sensor.mustPublish("sensors/sensor-1/t", "21")
	if st, _, _ := sensor.publish("sensors/sensor-2/t", []byte("x"), ""); st != http.StatusForbidden {
		t.Fatalf("publish outside ACL: %d", st)
	}
	if _, st, _ := sensor.subscribe("cmd/#", "", false); st != http.StatusForbidden {
		t.Fatalf("subscribe outside ACL: %d", st)
	}
	sensor.mustSubscribe("cmd/sensor-1/#", "", false)

	// Streamed publish on the sensor's authenticated connection: the ACL
	// applies to every frame.
	sp := openStream(t, sensor.c, b.URL)
	sp.send(1, "sensors/sensor-1/t", []byte("ok"), wire.PubQoS1, 0)
	sp.send(2, "sensors/sensor-2/t", []byte("no"), wire.PubQoS1, 0)
	sp.flush(t)
	for _, want := range []uint64{0, http.StatusForbidden} {
		a, err := sp.dec.Ack()
		if err != nil || a.Status != want {
			t.Fatalf("stream ack %+v %v, want status %d", a, err, want)
		}
	}

	basic := newClient(t, b, nil)
	basic.hdr.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("sensor-1:pw")))
	basic.mustPublish("sensors/sensor-1/t", "22")
	basic.hdr.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("sensor-1:nope")))
	if st, _, _ := basic.publish("sensors/sensor-1/t", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("bad password: %d", st)
	}
}

func TestTokenBoundToConnection(t *testing.T) {
	acl, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl})
	c := newClient(t, b, nil)
	c.hdr.Set("Authorization", "Bearer tok-admin")
	c.mustPublish("a", "first")
	c.hdr.Del("Authorization")
	// Same QUIC connection: no header needed any more.
	c.mustPublish("a", "second")
	c.mustSubscribe("a", "", false)
	// Credentials on a later request of the connection (a client that
	// authenticates every request) are checked again: the same identity
	// passes, bad credentials get 401, another identity's token 403, and
	// the connection keeps its identity.
	c.hdr.Set("Authorization", "Bearer tok-admin")
	c.mustPublish("a", "third")
	c.hdr.Set("Authorization", "Bearer wrong")
	if st, _, body := c.publish("a", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("bad token on a later request: %d %s", st, body)
	}
	c.hdr.Set("Authorization", "Bearer tok-sensor")
	if st, _, body := c.publish("sensors/sensor-1/t", []byte("x"), ""); st != http.StatusForbidden {
		t.Fatalf("another identity's token on a later request: %d %s", st, body)
	}
	c.hdr.Del("Authorization")
	c.mustPublish("a", "fourth")
	// A new connection must authenticate again.
	other := newClient(t, b, nil)
	if st, _, _ := other.publish("a", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("new connection without token: %d", st)
	}
	if st := b.Stats().Protocols["h3"]; st.ConnsTotal < 2 {
		t.Fatalf("connection count %+v", st)
	}
}

func TestMTLSIdentity(t *testing.T) {
	acl, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	pki := testutil.NewPKI(t)
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool()})
	cert := pki.Client(t, "sensor-1")
	c := newClient(t, b, &cert)
	c.mustPublish("sensors/sensor-1/t", "by cert")
	if st, _, _ := c.publish("sensors/admin/t", []byte("x"), ""); st != http.StatusForbidden {
		t.Fatalf("cert identity outside its ACL: %d", st)
	}
	// A certificate from another CA is refused in the handshake.
	stranger := testutil.NewPKI(t).Client(t, "admin")
	sc := newClient(t, b, &stranger)
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/topics/a", nil)
	if resp, err := sc.c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("foreign client certificate accepted: %d", resp.StatusCode)
	}
	noCert := newClient(t, b, nil)
	if st, _, _ := noCert.publish("sensors/sensor-1/t", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("no certificate, no token: %d", st)
	}
}

func TestSlowSubscriberDoesNotDelayFast(t *testing.T) {
	for _, policy := range []broker.QueuePolicy{broker.DropOldest, broker.Disconnect} {
		t.Run(policy.String(), func(t *testing.T) {
			b2 := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{QueueLength: 256, HistoryPerTopic: -1, QueuePolicy: policy}})
			pub := newClient(t, b2, nil)
			// The slow subscriber never reads, and its tiny flow-control
			// window blocks the broker's writes after a few messages.
			slowC := newClient(t, b2, nil)
			slowC.c = testutil.H3ClientQUIC(b2.PKI.Pool(), nil, nil, &quic.Config{
				InitialStreamReceiveWindow: 8 << 10, MaxStreamReceiveWindow: 8 << 10,
				InitialConnectionReceiveWindow: 16 << 10, MaxConnectionReceiveWindow: 16 << 10,
			})
			t.Cleanup(func() { slowC.c.Transport.(*http3.Transport).Close() })
			slow := slowC.mustSubscribe("load", "", false)
			fastC := newClient(t, b2, nil)
			fast := fastC.mustSubscribe("load", "", false)
			const n = 600
			payload := strings.Repeat("p", 1024)
			done := make(chan error, 1)
			go func() {
				for i := range n {
					f, err := fast.next()
					if err != nil {
						done <- err
						return
					}
					if f.IsGap() || string(f.Payload) != payload {
						done <- fmt.Errorf("message %d: unexpected %+v", i, f.Flags)
						return
					}
				}
				done <- nil
			}()
			for range n {
				pub.mustPublish("load", payload, "qos=0")
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			st := b2.Stats()
			if policy == broker.DropOldest && st.Dropped == 0 {
				t.Fatalf("slow subscriber dropped nothing: %+v", st)
			}
			if policy == broker.Disconnect && st.CutOff == 0 {
				t.Fatalf("slow subscriber not cut off: %+v", st)
			}
			if st.QueueDepthMax > 256 {
				t.Fatalf("queue grew past its bound: %+v", st)
			}
			// The slow one, when it finally reads, is told about its losses.
			sawGap := false
			for {
				f, err := slow.next()
				if err != nil {
					break
				}
				if f.IsGap() {
					sawGap = true
					break
				}
			}
			if !sawGap {
				t.Fatal("slow subscriber got no gap signal")
			}
		})
	}
}

func TestShutdownDrains(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	s := c.mustSubscribe("d", "", false)
	for i := range 20 {
		c.mustPublish("d", fmt.Sprint(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- b.Shutdown(ctx) }()
	for i := range 20 {
		s.expect("d", fmt.Sprint(i))
	}
	if _, err := s.next(); err == nil {
		t.Fatal("subscription still open after shutdown")
	}
	if err := <-errc; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := b.Publish(context.Background(), broker.Message{Topic: "d"}); !errors.Is(err, broker.ErrShuttingDown) {
		t.Fatalf("publish after shutdown: %v", err)
	}
	if err := b.Serve(); err == nil {
		t.Fatal("Serve after shutdown succeeded")
	}
}

func TestShutdownStopsStreamedPublisher(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/publish", pr)
	go func() {
		p := wire.Publish{ID: 1, Flags: wire.PubQoS1, Topic: "s", Payload: []byte("x")}
		_, _ = pw.Write(wire.AppendPublish(nil, &p))
	}()
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := wire.NewDecoder(resp.Body, 0)
	if a, err := dec.Ack(); err != nil || a.Seq == 0 {
		t.Fatalf("ack %+v %v", a, err)
	}
	// As a real publisher does: read acks until the broker ends the
	// response, then end the request body.
	ended := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			_, err = dec.Ack() // a 503 ack may come first
		}
		_ = pw.Close()
		ended <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open publish stream: %v (after %v)", err, time.Since(start))
	}
	if err := <-ended; err != io.EOF {
		t.Fatalf("publish stream ended with %v, want a clean end (io.EOF)", err)
	}
}

func TestTapAndCrossProtocolPublish(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	var mu sync.Mutex
	var seen []string
	b.AddTap(func(m *broker.Message) {
		mu.Lock()
		seen = append(seen, m.Origin+":"+m.Topic)
		mu.Unlock()
	})
	c := newClient(t, b, nil)
	s := c.mustSubscribe("x/#", "", false)
	seq, err := b.Publish(context.Background(), broker.Message{Topic: "x/mqtt", Payload: []byte("m"), Origin: "mqtt", Retain: true})
	if err != nil || seq == 0 {
		t.Fatal(seq, err)
	}
	c.mustPublish("x/h3", "h")
	s.expect("x/mqtt", "m", "x/h3", "h")
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "mqtt:x/mqtt,h3:x/h3" {
		t.Fatalf("tap saw %v", seen)
	}
	st := b.Stats()
	if st.Protocols["mqtt"].MessagesIn != 1 || st.Protocols["h3"].MessagesIn != 1 || st.Protocols["h3"].MessagesOut != 2 {
		t.Fatalf("stats %+v", st)
	}
	for _, tc := range []struct {
		m    broker.Message
		want error
	}{
		{broker.Message{Topic: "a/+"}, broker.ErrBadTopic},
		{broker.Message{Topic: "a", Payload: make([]byte, 300<<10)}, broker.ErrTooLarge},
		{broker.Message{Topic: "a", QoS: 3}, broker.ErrBadQoS},
	} {
		if _, err := b.Publish(context.Background(), tc.m); !errors.Is(err, tc.want) {
			t.Fatalf("Publish(%q): %v, want %v", tc.m.Topic, err, tc.want)
		}
	}
}

func TestTCPAndAltSvc(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get(b.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, port, _ := strings.Cut(b.Addr().String(), ":")
	if resp.ProtoMajor != 2 || !strings.Contains(resp.Header.Get("Alt-Svc"), `h3=":`+port+`"`) {
		t.Fatalf("proto %s, Alt-Svc %q", resp.Proto, resp.Header.Get("Alt-Svc"))
	}
	// SSE over HTTP/2, publish over HTTP/1.1-or-2 too.
	req, _ := http.NewRequest(http.MethodGet, b.URL+"/v1/topics/tcp/%23?count=1", nil)
	req.Header.Set("Accept", "text/event-stream")
	sresp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	presp, err := hc.Post(b.URL+"/v1/topics/tcp/x", "application/octet-stream", strings.NewReader("over tcp"))
	if err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	if presp.StatusCode != http.StatusNoContent {
		t.Fatalf("publish over tcp: %d", presp.StatusCode)
	}
	body, err := io.ReadAll(sresp.Body) // count=1 ends the stream
	if err != nil {
		t.Fatal(err)
	}
	ev, err := wire.NewSSEReader(bytes.NewReader(body)).Next()
	if err != nil {
		t.Fatalf("%v in %q", err, body)
	}
	for ev.Event != "message" {
		t.Fatalf("event %+v", ev)
	}
	if f, err := ev.Frame(); err != nil || string(f.Payload) != "over tcp" {
		t.Fatalf("%+v %v", f, err)
	}
	if b.Stats().Protocols["tcp"].ConnsTotal == 0 {
		t.Fatal("tcp connection not counted")
	}
}

// TestStreamedPublishOverTCP: the streamed publish is full duplex over
// HTTP/2 and HTTP/1.1 too.
func TestStreamedPublishOverTCP(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: h2}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			defer tr.CloseIdleConnections()
			pr, pw := io.Pipe()
			defer pw.Close()
			req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/publish", pr)
			req.Header.Set("Content-Type", wire.ContentType)
			go func() {
				p := wire.Publish{ID: 7, Flags: wire.PubQoS1, Topic: "tcp/stream", Payload: []byte("x")}
				_, _ = pw.Write(wire.AppendPublish(nil, &p))
			}()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if (resp.ProtoMajor == 2) != h2 {
				t.Fatalf("protocol %s", resp.Proto)
			}
			dec := wire.NewDecoder(resp.Body, 0)
			if a, err := dec.Ack(); err != nil || a.ID != 7 || a.Seq == 0 {
				t.Fatalf("ack %+v %v", a, err)
			}
			// A second frame after the first ack: the stream is live both ways.
			p := wire.Publish{ID: 8, Flags: wire.PubQoS1, Topic: "tcp/stream", Payload: []byte("y")}
			if _, err := pw.Write(wire.AppendPublish(nil, &p)); err != nil {
				t.Fatal(err)
			}
			if a, err := dec.Ack(); err != nil || a.ID != 8 {
				t.Fatalf("ack %+v %v", a, err)
			}
		})
	}
}

func TestLeanTuning(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Tuning: quictune.Lean()})
	c := newClient(t, b, nil)
	s := c.mustSubscribe("lean/#", "", false)
	c.mustPublish("lean/x", "small windows")
	s.expect("lean/x", "small windows")
}
