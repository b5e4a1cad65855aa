package web

import (
	"encoding/base64"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// previewBytes is how much of a payload /v1/stats/topics shows.
const previewBytes = 256

// TopicInfo is what /v1/stats/topics says about one topic.
type TopicInfo struct {
	// Topic is the topic name.
	Topic string `json:"topic"`
	// Count is the number of messages accepted since the broker started.
	Count uint64 `json:"count"`
	// Last is the last payload (at most 256 bytes): text when it is UTF-8,
	// else base64 (Encoding "base64").
	Last string `json:"last"`
	// Encoding is "" (text) or "base64".
	Encoding string `json:"encoding,omitempty"`
	// Size is the last payload's full size in bytes.
	Size int `json:"size"`
	// Truncated marks a Last shorter than the payload.
	Truncated bool `json:"truncated,omitempty"`
	// Time is when the last message was accepted, Unix milliseconds.
	Time int64 `json:"time"`
	// Retained reports whether the topic holds a retained message (as
	// seen since start: set by a retained publish, cleared by an empty one).
	Retained bool `json:"retained"`
	// Origin is the protocol of the last message ("h3", "mqtt").
	Origin string `json:"origin"`
}

// topicTable tracks the topics the broker accepted messages for.
type topicTable struct {
	mu        sync.Mutex
	max       int
	m         map[string]*topicEntry
	untracked uint64
}

type topicEntry struct {
	count    uint64
	last     []byte
	size     int
	at       time.Time
	retained bool
	origin   string
}

func newTopicTable(max int) *topicTable {
	return &topicTable{max: max, m: map[string]*topicEntry{}}
}

func (t *topicTable) observe(topic string, payload []byte, retain bool, origin string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[topic]
	if e == nil {
		if len(t.m) >= t.max {
			t.untracked++
			return
		}
		e = &topicEntry{}
		t.m[topic] = e
	}
	e.count++
	n := min(len(payload), previewBytes)
	e.last = append(e.last[:0], payload[:n]...)
	e.size = len(payload)
	e.at = now
	e.origin = origin
	if retain {
		e.retained = len(payload) > 0
	}
}

// snapshot returns every tracked topic, sorted, and the count of messages
// to topics beyond the limit.
func (t *topicTable) snapshot() ([]TopicInfo, uint64) {
	t.mu.Lock()
	out := make([]TopicInfo, 0, len(t.m))
	for name, e := range t.m {
		ti := TopicInfo{Topic: name, Count: e.count, Size: e.size, Truncated: len(e.last) < e.size,
			Time: e.at.UnixMilli(), Retained: e.retained, Origin: e.origin}
		if utf8.Valid(e.last) || (ti.Truncated && utf8.Valid(trimPartialRune(e.last))) {
			ti.Last = string(trimPartialRune(e.last))
		} else {
			ti.Last, ti.Encoding = base64.StdEncoding.EncodeToString(e.last), "base64"
		}
		out = append(out, ti)
	}
	u := t.untracked
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, u
}

// trimPartialRune drops a UTF-8 sequence cut at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.Valid(b[:len(b)-i]) {
			return b[:len(b)-i]
		}
	}
	return b
}
