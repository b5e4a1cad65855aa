package wire

import (
	"fmt"
	"net/url"
	"strings"
)

// This file holds the names of the protocol's HTTP exchanges (docs/pubsub.md
// is its contract): paths, header names, query parameters, media types and
// the encoding of a topic in a request path. The broker (broker/http.go) and
// the client (device/client) both take them from here.

// Paths of the protocol.
const (
	// PathTopics is the collection of topics: POST PathTopics/{topic}
	// publishes one message, GET PathTopics/{filter} subscribes. The topic
	// or filter follows as one percent-encoded path segment (TopicURL,
	// TopicFromURL), or, for every topic, as the query parameter
	// QueryTopic of PathTopics alone.
	PathTopics = "/v1/topics"
	// PathPublish takes a publish stream: POST, a body of publish frames,
	// a response body of ack frames.
	PathPublish = "/v1/publish"
	// PathHealth answers GET with "ok" (and the cluster link's state) while
	// the broker serves.
	PathHealth = "/healthz"
	// PathSession is a browser's session: POST gets a token (and cookie),
	// GET says who the caller is, DELETE ends the token (docs/browser.md).
	PathSession = "/v1/session"
	// PathStats answers GET with the broker's counters as JSON.
	PathStats = "/v1/stats"
	// PathStatsTopics answers GET with the topics seen since start.
	PathStatsTopics = "/v1/stats/topics"
)

// Header names of the protocol.
const (
	// HeaderSeq, on the response to a publish, is the sequence number the
	// broker gave the message.
	HeaderSeq = "Quiot-Seq"
	// HeaderTime, on a publish request, is the publisher's send time in
	// Unix nanoseconds.
	HeaderTime = "Quiot-Time"
	// MQTTTimeProperty is the MQTT 5 user property carrying the
	// publisher's send time (unix nanoseconds, decimal), HeaderTime's
	// counterpart on the MQTT side.
	MQTTTimeProperty = "quiot-time"
	// HeaderMsgID, on a publish request, is the client's message id: a
	// repeat of the id gets the first answer, which makes a replayed
	// publish (0-RTT data) harmless.
	HeaderMsgID = "Quiot-Msg-Id"
	// MQTTMsgIDProperty is the MQTT 5 user property carrying a PUBLISH's
	// client message id, HeaderMsgID's counterpart: the broker publishes
	// an id once, which makes a replayed PUBLISH (0-RTT data) harmless.
	MQTTMsgIDProperty = "quiot-msg-id"
	// HeaderPayload carries a publish's payload, base64url without
	// padding, when the request has no body (a 0-RTT publish).
	HeaderPayload = "Quiot-Payload"
	// HeaderEpoch is the response header carrying the broker's epoch.
	HeaderEpoch = "Quiot-Epoch"
	// HeaderHeartbeat, "1" on a subscribe request, asks for heartbeat
	// frames; on the response it is the heartbeat interval in milliseconds.
	HeaderHeartbeat = "Quiot-Heartbeat"
	// HeaderLastEventID, on a subscribe request, is a resume point (SEQ or
	// EPOCH-SEQ) where QuerySince is not given: what an EventSource resends
	// when it reconnects.
	HeaderLastEventID = "Last-Event-ID"
)

// Query parameters of the protocol.
const (
	// QueryTopic names the topic or filter of a request to PathTopics
	// alone (the only way to name the topics "." and "..").
	QueryTopic = "topic"
	// QueryQoS is a publish's QoS: 0, or 1 (the default).
	QueryQoS = "qos"
	// QueryRetain, 1 or true on a publish, makes the message its topic's
	// retained message.
	QueryRetain = "retain"
	// QuerySince is a subscription's resume point: SEQ or EPOCH-SEQ.
	QuerySince = "since"
	// QueryEpoch is the epoch (HeaderEpoch) of a subscription's resume
	// point.
	QueryEpoch = "epoch"
	// QueryCount is the number of messages after which the broker ends a
	// subscription.
	QueryCount = "count"
	// QueryPayload, "base64" on an SSE subscription, has every payload sent
	// as base64.
	QueryPayload = "payload"
)

// ContentTypeSSE is the media type of a subscription as Server-Sent Events
// (asked for with Accept); ContentType is that of binary frames.
const ContentTypeSSE = "text/event-stream"

// TopicURL returns the URL of PathTopics/{topic} on base's scheme and host,
// with the query q: the whole topic percent-encoded as one path segment
// ('/' as %2F, '#' as %23), the broker's one encoding rule. The topics "."
// and "..", dot segments that URL normalisation removes, go as
// PathTopics?topic= instead.
func TopicURL(base *url.URL, topic string, q url.Values) *url.URL {
	u := &url.URL{Scheme: base.Scheme, Host: base.Host}
	if topic == "." || topic == ".." {
		q2 := url.Values{}
		for k, v := range q {
			q2[k] = v
		}
		q2.Set(QueryTopic, topic)
		u.Path = PathTopics
		u.RawQuery = q2.Encode()
		return u
	}
	u.Path = PathTopics + "/" + topic
	u.RawPath = PathTopics + "/" + url.PathEscape(topic)
	u.RawQuery = q.Encode()
	return u
}

// PublishTopicURL is TopicURL for a publish: a topic whose levels are all
// safe as path segments (none empty, none a dot segment, which URL
// normalisation would remove or merge) travels with raw '/' between its
// levels, which TopicFromURL reads as the same topic: "%2F" costs about 1.5
// bytes more per level after QPACK's Huffman coding, on every request.
// Other topics are one percent-encoded segment, as in TopicURL.
func PublishTopicURL(base *url.URL, topic string, q url.Values) *url.URL {
	if !rawLevelsSafe(topic) {
		return TopicURL(base, topic, q)
	}
	levels := strings.Split(topic, "/")
	for i, l := range levels {
		levels[i] = url.PathEscape(l)
	}
	return &url.URL{Scheme: base.Scheme, Host: base.Host, Path: PathTopics + "/" + topic,
		RawPath: PathTopics + "/" + strings.Join(levels, "/"), RawQuery: q.Encode()}
}

// rawLevelsSafe reports whether every level of topic may travel as its own
// path segment: not empty and not "." or "..".
func rawLevelsSafe(topic string) bool {
	for l := range strings.SplitSeq(topic, "/") {
		if l == "" || l == "." || l == ".." {
			return false
		}
	}
	return true
}

// TopicFromURL returns the topic or filter a request URL to PathTopics
// names: the percent-decoded rest of the path after PathTopics + "/"
// (TopicFromPath), or, for the path PathTopics alone, the query parameter
// QueryTopic (the only way to name the topics "." and "..", which are dot
// segments in any path).
func TopicFromURL(u *url.URL) (string, error) {
	if u.Path == PathTopics {
		q := u.Query()
		if !q.Has(QueryTopic) {
			return "", fmt.Errorf("no topic: use %s/{topic} or %s?%s={topic}", PathTopics, PathTopics, QueryTopic)
		}
		return q.Get(QueryTopic), nil
	}
	return TopicFromPath(u.EscapedPath())
}

// TopicFromPath decodes the topic or filter of an escaped request path
// PathTopics/{topic}. The topic should travel as one percent-encoded
// segment ("a%2F..%2Fb"); raw '/' between levels is accepted and means the
// same. A segment that URL normalisation would remove or merge (".", "..",
// or their %2E forms, as WHATWG URL parsers treat them) is refused: a client
// that normalises URLs could not have sent the path as it was meant.
func TopicFromPath(escaped string) (string, error) {
	rest, ok := strings.CutPrefix(escaped, PathTopics+"/")
	if !ok {
		return "", fmt.Errorf("path %q does not start with %s/ once percent-encoded", escaped, PathTopics)
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if isDotSegment(seg) {
			return "", fmt.Errorf("path segment %q is a dot segment, which URL normalisation removes: send the topic as one percent-encoded segment (a%%2F..%%2Fb), or as %s?%s=", seg, PathTopics, QueryTopic)
		}
	}
	t, err := url.PathUnescape(rest)
	if err != nil {
		return "", fmt.Errorf("bad percent-encoding in topic %q: %w", rest, err)
	}
	return t, nil
}

// isDotSegment reports whether a raw path segment is "." or "..", also with
// its dots percent-encoded ("%2e", ".%2E", ...).
func isDotSegment(seg string) bool {
	if len(seg) > 6 {
		return false
	}
	s := strings.ReplaceAll(strings.ReplaceAll(seg, "%2e", "."), "%2E", ".")
	return s == "." || s == ".."
}
