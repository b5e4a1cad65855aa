package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quiot/quiot/broker"
)

func TestEncodeTopic(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, topic, want string }{
		{"plain", "a/b/c", "a.b.c"},
		{"dot", "a.b/c", "a=2Eb.c"},
		{"star", "*/x", "=2A.x"},
		{"gt", "a/>", "a.=3E"},
		{"space", "room 1/t", "room=201.t"},
		{"dollar", "$SYS/x", "=24SYS.x"},
		{"empty levels", "/a//b/", "=.a.=.b.="},
		{"single empty", "", "="},
		{"escape char", "a=b", "a=3Db"},
		{"non-ascii", "café", "caf=C3=A9"},
		{"plus hash literal in name", "a+b#", "a=2Bb=23"},
		{"tab and tilde", "x\t~", "x=09=7E"},
		{"underscore dash", "_-_", "_-_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeTopic(tt.topic)
			if got != tt.want {
				t.Fatalf("EncodeTopic(%q) = %q, want %q", tt.topic, got, tt.want)
			}
			back, err := DecodeTopic(got)
			if err != nil || back != tt.topic {
				t.Fatalf("DecodeTopic(%q) = %q, %v", got, back, err)
			}
		})
	}
}

func TestDecodeTopicErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a..b", ".a", "a.", "a=", "a=4", "a=zz", "a=2e", "a=41", "a*", ">", "a b", "a~"} {
		t.Run(s, func(t *testing.T) {
			if got, err := DecodeTopic(s); !errors.Is(err, ErrBadSubject) {
				t.Fatalf("DecodeTopic(%q) = %q, %v; want ErrBadSubject", s, got, err)
			}
		})
	}
}

func TestFilterSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filter string
		want   []string
	}{
		{"a/b", []string{"a.b"}},
		{"a/+/c", []string{"a.*.c"}},
		{"a/#", []string{"a", "a.>"}},
		{"#", []string{">"}},
		{"+", []string{"*"}},
		{"+/#", []string{"*", "*.>"}},
		{"a.b/+", []string{"a=2Eb.*"}},
		{"/#", []string{"=", "=.>"}},
		{"$SYS/#", []string{"=24SYS", "=24SYS.>"}},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			if got := FilterSubjects(tt.filter); !slices.Equal(got, tt.want) {
				t.Fatalf("FilterSubjects(%q) = %q, want %q", tt.filter, got, tt.want)
			}
		})
	}
}

// subjectMatch is NATS's subject matching (for the fuzz check).
func subjectMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(p) == len(s)
}

// FuzzTopicSubject: every topic round-trips through its subject, the
// subject is a valid NATS literal subject (no wildcard token, no empty
// token, no space), and a filter's subjects receive every topic the filter
// matches.
func FuzzTopicSubject(f *testing.F) {
	for _, s := range []string{"a/b", "a.b/*/>", "", "/", "$SYS/x", "caf\u00e9/ \t", "a=3D"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		if !utf8.ValidString(topic) || strings.ContainsAny(topic, "+#\x00") {
			return // not a valid MQTT topic name
		}
		s := EncodeTopic(topic)
		back, err := DecodeTopic(s)
		if err != nil || back != topic {
			t.Fatalf("round trip %q -> %q -> %q, %v", topic, s, back, err)
		}
		if again := EncodeTopic(back); again != s {
			t.Fatalf("not canonical: %q vs %q", again, s)
		}
		for _, tok := range strings.Split(s, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
				t.Fatalf("subject %q has bad token %q", s, tok)
			}
		}
		// The filter made of the topic's first level and # receives it.
		first, _, _ := strings.Cut(topic, "/")
		filter := first + "/#"
		ok := false
		for _, p := range FilterSubjects(filter) {
			ok = ok || subjectMatch(p, s)
		}
		if !ok {
			t.Fatalf("subjects of %q miss topic %q (%q)", filter, topic, s)
		}
	})
}

// FuzzRetainedValue: decoding never panics, and what encodes decodes back.
func FuzzRetainedValue(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0})
	f.Add(encodeRetained("b1-0a0b", &broker.Message{Topic: "t", Payload: []byte("x"), QoS: 1, Seq: 7, Time: -3, Identity: "alice", Origin: "h3"}, 7))
	f.Fuzz(func(t *testing.T, v []byte) {
		in, err := decodeRetained("t", v)
		if err != nil {
			return
		}
		m := in.m
		back, err := decodeRetained("t", encodeRetained(in.origin, &broker.Message{Payload: m.Payload, QoS: m.QoS, Time: m.Time, Identity: m.Identity}, m.Seq))
		if err != nil || string(back.m.Payload) != string(m.Payload) || back.m.Time != m.Time || back.m.Identity != m.Identity || back.origin != in.origin || back.m.Seq != m.Seq || back.key != in.key {
			t.Fatalf("re-encoding changed %+v to %+v (%v)", in, back, err)
		}
	})
}

// TestDisjointSubjects: the stream consumer's filter has no two subjects
// that match a common subject (JetStream refuses such a filter).
func TestDisjointSubjects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []string
		want []string
		ok   bool
	}{
		{[]string{"q.gap", "q.m.a", "q.m.a.>", "q.m.a.*"}, []string{"q.gap", "q.m.a", "q.m.a.>"}, true},
		{[]string{"q.m.a.b", "q.m.*.b", "q.m.>"}, []string{"q.m.>"}, true},
		{[]string{"q.m.a", "q.m.a"}, []string{"q.m.a"}, true},
		{[]string{"q.m.a.*.c", "q.m.a.b.*"}, nil, false},
		{[]string{"q.m.x", "q.m.y.>", "q.m.z.*"}, []string{"q.m.x", "q.m.y.>", "q.m.z.*"}, true},
	} {
		got, ok := disjointSubjects(tt.in)
		if ok != tt.ok || strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("disjointSubjects(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	for _, tt := range []struct {
		a, b            string
		collide, covers bool
	}{
		{"a.>", "a", false, false},
		{"a.>", "a.b.c", true, true},
		{"a.*", "a.b", true, true},
		{"a.b", "a.*", true, false},
		{"a.*.c", "a.b.*", true, false},
		{"a.b", "a.c", false, false},
		{"a.*", "a.>", true, false},
	} {
		if c := subjectsCollide(tt.a, tt.b); c != tt.collide {
			t.Errorf("subjectsCollide(%q, %q) = %v", tt.a, tt.b, c)
		}
		if c := subjectCovers(tt.a, tt.b); c != tt.covers {
			t.Errorf("subjectCovers(%q, %q) = %v", tt.a, tt.b, c)
		}
	}
}
