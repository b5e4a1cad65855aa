package bridge

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/backoff"
	"github.com/quiot/quiot/internal/wire"
)

// An https:// upstream is another quiot spoken to over HTTP/3 with the
// pub-sub protocol of docs/pubsub.md (the layering keeps broker/ from
// importing device/client, so the bridge has its own small client on
// internal/wire): each message goes up as POST /v1/topics/{topic} with a
// Quiot-Msg-Id, so that the upstream answers a publish sent again (cut by
// a lost connection) without publishing it twice; each in filter is a
// GET /v1/topics/{filter} subscription that resumes after an outage with
// ?since=SEQ&epoch=EPOCH, so what the upstream's history holds of the
// outage comes down, once.

// defaultHTTPSPort is the port of an https:// URL without one (quiot
// broker's default --listen).
const defaultHTTPSPort = "4433"

// h3Link is the HTTP/3 side of an https:// bridge.
type h3Link struct {
	tr    *http3.Transport
	base  *url.URL
	auth  string // Authorization header ("" none)
	nonce string // prefix of the message ids: one per bridge run
	wg    sync.WaitGroup

	mu sync.Mutex
	qc *quic.Conn // the current connection
}

func (br *Bridge) newH3Link() *h3Link {
	l := &h3Link{base: &url.URL{Scheme: "https", Host: quicAddr(br.u)}}
	var n [8]byte
	_, _ = rand.Read(n[:])
	l.nonce = "qb" + hex.EncodeToString(n[:])
	switch {
	case br.cfg.Username != "":
		l.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(br.cfg.Username+":"+br.cfg.Password))
	case br.cfg.Password != "":
		l.auth = "Bearer " + br.cfg.Password
	}
	qc := br.quic.QUICConfig()
	qc.TokenStore = br.tokens
	if qc.KeepAlivePeriod == 0 {
		// A profile without keep-alive ("default"): an out-only bridge
		// with nothing to send would lose its connection to the idle
		// timeout and make it again, over and over.
		idle := qc.MaxIdleTimeout
		if idle == 0 {
			idle = 30 * time.Second // quic-go's
		}
		qc.KeepAlivePeriod = idle / 2
	}
	l.tr = &http3.Transport{TLSClientConfig: br.tlsCfg, QUICConfig: qc, DisableCompression: true, Dial: br.dialH3}
	return l
}

// dialH3 is the transport's dialer: it records each new connection as the
// bridge's upstream connection (up until the connection ends).
func (br *Bridge) dialH3(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
	hctx := ctx
	if qc.HandshakeIdleTimeout == 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
	}
	c, err := quic.DialAddr(hctx, addr, tc, qc)
	if err != nil {
		if ctx.Err() == nil && hctx.Err() != nil {
			err = errors.New("no answer over UDP in time")
		}
		err = fmt.Errorf("https %s: %w", addr, err)
		br.onConnectError(err)
		return nil, err
	}
	br.noteResumed(c)
	br.h3.mu.Lock()
	br.h3.qc = c
	br.h3.mu.Unlock()
	br.markUp(false)
	context.AfterFunc(c.Context(), func() {
		br.h3.mu.Lock()
		current := br.h3.qc == c
		if current {
			br.h3.qc = nil
		}
		br.h3.mu.Unlock()
		if current {
			br.onDown()
		}
	})
	return c, nil
}

// startH3 runs the goroutines of an https:// bridge: one that keeps a
// connection up (a GET /healthz makes one when there is none) and one
// subscription per in filter.
func (br *Bridge) startH3() {
	br.h3.wg.Add(1 + len(br.cfg.In))
	go br.h3Keep()
	for _, f := range br.cfg.In {
		go br.h3Subscribe(br.cfg.RemotePrefix + f)
	}
}

// close ends the transport once the bridge's context is cancelled and
// waits for the link's goroutines.
func (l *h3Link) close() {
	l.wg.Wait()
	_ = l.tr.Close()
}

// h3Keep connects, and connects again whenever the connection is lost,
// with the bridge's backoff.
func (br *Bridge) h3Keep() {
	defer br.h3.wg.Done()
	back := backoff.Backoff{Base: br.cfg.ReconnectMin, Max: br.cfg.ReconnectMax}
	attempt := 0
	for br.ctx.Err() == nil {
		br.mu.Lock()
		up, conn := br.up, br.connCtx
		br.mu.Unlock()
		if up {
			attempt = 0
			select {
			case <-conn.Done():
			case <-br.ctx.Done():
			}
			continue
		}
		if attempt > 0 {
			select {
			case <-time.After(back.Delay(attempt - 1)):
			case <-br.ctx.Done():
				return
			}
		}
		attempt++
		ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, br.h3.base.JoinPath(wire.PathHealth).String(), nil)
		if err == nil {
			var resp *http.Response
			if resp, err = br.h3.do(req); err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
				_ = resp.Body.Close()
			}
		}
		cancel()
		if err != nil && br.ctx.Err() == nil {
			br.log.Debug("bridge: https upstream unreachable", "error", err)
		}
	}
}

func (l *h3Link) do(req *http.Request) (*http.Response, error) {
	req.Header["User-Agent"] = []string{""}
	if l.auth != "" {
		req.Header.Set("Authorization", l.auth)
	}
	return l.tr.RoundTrip(req)
}

// publishH3 publishes m over HTTP/3 with the message id nonce-id (the
// upstream publishes a repeat of it once); ctx ends with the connection.
func (br *Bridge) publishH3(ctx context.Context, m upMsg) (int, error) {
	q := url.Values{}
	if br.cfg.QoS == 0 {
		q.Set(wire.QueryQoS, "0")
	}
	if m.retain {
		q.Set(wire.QueryRetain, "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wire.PublishTopicURL(br.h3.base, m.topic, q).String(), bytes.NewReader(m.payload))
	if err != nil {
		return br.refuse(m.topic, err.Error()), nil
	}
	req.ContentLength = int64(len(m.payload))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(m.payload)), nil }
	sent := m.time
	if sent <= 0 {
		sent = time.Now().UnixNano()
	}
	req.Header.Set(wire.HeaderTime, strconv.FormatInt(sent, 10))
	req.Header.Set(wire.HeaderMsgID, br.h3.nonce+"-"+strconv.FormatUint(m.id, 10))
	resp, err := br.h3.do(req)
	if err != nil {
		if br.ctx.Err() != nil {
			return upStopped, nil
		}
		return upRetry, err
	}
	reason, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	switch c := resp.StatusCode; {
	case c/100 == 2:
		return upSent, nil
	case c == http.StatusTooManyRequests || c == http.StatusServiceUnavailable || c == http.StatusTooEarly || c == http.StatusRequestTimeout || c/100 == 5:
		return upRetry, fmt.Errorf("upstream answered %d %s", c, firstLine(reason))
	default:
		return br.refuse(m.topic, fmt.Sprintf("%d %s", c, firstLine(reason))), nil
	}
}

// refuse gives up a message the upstream refused (why: its answer).
func (br *Bridge) refuse(topic, why string) int {
	br.refused.Add(1)
	br.setErr(fmt.Sprintf("upstream refused a publish to %q (%s)", topic, why))
	br.log.Warn("bridge: upstream refused a message; giving it up (counted in refused)", "topic", topic, "reason", why)
	return upRefused
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// h3Resume is the resume point of one HTTP/3 subscription: the broker's
// epoch, the highest sequence number seen, and the last one per topic
// (which drops what a resume replays twice).
type h3Resume struct {
	epoch, since uint64
	last         map[string]uint64
}

func (r *h3Resume) reset() { r.since, r.last = 0, map[string]uint64{} }

// accept reports whether a message frame is new, and moves the resume
// point.
func (r *h3Resume) accept(f *wire.Frame) bool {
	if f.Seq == 0 {
		return true
	}
	if last, ok := r.last[f.Topic]; ok && f.Seq <= last {
		return false
	}
	r.last[f.Topic] = f.Seq
	r.since = max(r.since, f.Seq)
	return true
}

// h3Subscribe keeps the subscription to the remote filter, resuming after
// each loss.
func (br *Bridge) h3Subscribe(filter string) {
	defer br.h3.wg.Done()
	back := backoff.Backoff{Base: br.cfg.ReconnectMin, Max: br.cfg.ReconnectMax}
	st := &h3Resume{}
	st.reset()
	attempt := 0
	for {
		conn, _ := br.connection()
		if conn == nil {
			return
		}
		subscribed, err := br.h3SubscribeOnce(filter, st)
		if br.ctx.Err() != nil {
			return
		}
		if subscribed {
			attempt = 0
		}
		br.setErr(err.Error())
		br.log.Debug("bridge: upstream subscription ended; resuming", "filter", filter, "since", st.since, "error", err)
		select {
		case <-time.After(back.Delay(attempt)):
		case <-br.ctx.Done():
			return
		}
		attempt++
	}
}

// h3SubscribeOnce runs one subscription until it ends; subscribed reports
// whether the upstream accepted it.
func (br *Bridge) h3SubscribeOnce(filter string, st *h3Resume) (subscribed bool, err error) {
	q := url.Values{}
	if st.epoch != 0 && st.since > 0 {
		q.Set(wire.QuerySince, strconv.FormatUint(st.since, 10))
		q.Set(wire.QueryEpoch, wire.FormatEpoch(st.epoch))
	}
	ctx, cancel := context.WithCancel(br.ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, wire.TopicURL(br.h3.base, filter, q).String(), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", wire.ContentType)
	req.Header.Set(wire.HeaderHeartbeat, "1")
	resp, err := br.h3.do(req)
	if err != nil {
		return false, fmt.Errorf("subscribe to %q: %w", filter, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		reason, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("upstream refused subscription %q (%d %s)", filter, resp.StatusCode, firstLine(reason))
		br.log.Warn("bridge: upstream refused a subscription", "filter", filter, "status", resp.StatusCode, "reason", firstLine(reason))
		return false, err
	}
	if e, err := wire.ParseEpoch(resp.Header.Get(wire.HeaderEpoch)); err == nil && e != st.epoch {
		if st.epoch != 0 {
			br.log.Info("bridge: the upstream restarted (new epoch): taking all its history", "filter", filter)
		}
		st.epoch = e
		st.reset()
	}
	br.subscribed.Add(1)
	br.notify()
	dec := wire.NewDecoder(resp.Body, wire.DefaultMaxFrame)
	for {
		f, err := dec.Frame()
		if err != nil {
			return true, fmt.Errorf("subscription %q: %w", filter, err)
		}
		switch {
		case f.IsHeartbeat():
		case f.IsGap():
			g, _ := f.Gap()
			if g.Restarted() {
				st.reset()
				continue
			}
			st.since = max(st.since, g.To)
			br.log.Warn("bridge: the upstream lost messages for this bridge (gap)", "filter", filter, "topic", g.Topic, "from", g.From, "to", g.To)
		case st.accept(&f):
			br.bringDown(f.Topic, f.Payload, br.cfg.QoS, f.Retained(), f.Time)
		}
	}
}
