package wire

import (
	"net/url"
	"testing"
)

func TestTopicFromPath(t *testing.T) {
	tests := []struct {
		name, path, want string
		ok               bool
	}{
		{"one segment", "/v1/topics/a%2Fb", "a/b", true},
		{"raw slashes", "/v1/topics/a/b", "a/b", true},
		{"leading slash", "/v1/topics/%2FTopicA", "/TopicA", true},
		{"raw empty level", "/v1/topics/a//b", "a//b", true},
		{"encoded dotdot level", "/v1/topics/a%2F..%2Fb", "a/../b", true},
		{"dots inside a level", "/v1/topics/a/...", "a/...", true},
		{"hash", "/v1/topics/a%2F%23", "a/#", true},
		{"empty", "/v1/topics/", "", true},
		{"dotdot", "/v1/topics/..", "", false},
		{"dot", "/v1/topics/.", "", false},
		{"dotdot middle", "/v1/topics/a/../b", "", false},
		{"encoded dotdot", "/v1/topics/%2E%2E", "", false},
		{"mixed dotdot", "/v1/topics/a/.%2E", "", false},
		{"encoded dot", "/v1/topics/%2e/a", "", false},
		{"bad escape", "/v1/topics/a%zz", "", false},
		{"other prefix", "/v1%2Ftopics/a", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TopicFromPath(tt.path)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("TopicFromPath(%q) = %q, %v; want %q ok=%v", tt.path, got, err, tt.want, tt.ok)
			}
		})
	}
}

// TestTopicURLRoundTrip checks that the broker reads every topic the
// client's encodings (TopicURL, PublishTopicURL) write as that topic.
func TestTopicURLRoundTrip(t *testing.T) {
	base := &url.URL{Scheme: "https", Host: "broker.example:4433"}
	topics := []string{
		"a/b/c", "sensors/#", "+/temp", "a b/50%", "$SYS/x", "/TopicA", "a/",
		"a//b", "a/../b", "a/./b", "..", ".", "a/%2e/b", "a?b=c", "",
	}
	encodings := []struct {
		name string
		enc  func(*url.URL, string, url.Values) *url.URL
	}{
		{"TopicURL", TopicURL},
		{"PublishTopicURL", PublishTopicURL},
	}
	for _, e := range encodings {
		for _, topic := range topics {
			t.Run(e.name+"/"+topic, func(t *testing.T) {
				sent := e.enc(base, topic, url.Values{QuerySince: {"7"}})
				// What the broker sees: the URL as it travels, parsed again.
				got, err := url.Parse(sent.String())
				if err != nil {
					t.Fatalf("url.Parse(%s): %v", sent, err)
				}
				name, err := TopicFromURL(got)
				if err != nil || name != topic {
					t.Fatalf("TopicFromURL(%s) = %q, %v; want %q", got, name, err, topic)
				}
				if s := got.Query().Get(QuerySince); s != "7" {
					t.Fatalf("%s: %s = %q, want the query kept (7)", got, QuerySince, s)
				}
			})
		}
	}
}
