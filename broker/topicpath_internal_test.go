package broker

import "testing"

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
			got, err := topicFromPath(tt.path)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("topicFromPath(%q) = %q, %v; want %q ok=%v", tt.path, got, err, tt.want, tt.ok)
			}
		})
	}
}
