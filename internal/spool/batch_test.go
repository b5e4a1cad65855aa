package spool

import (
	"errors"
	"fmt"
	"testing"
)

// TestAppendBatch: a batch is written in its order in one group commit
// (one write, one fsync with FsyncAlways); a message the spool refuses is
// left out with its error and the others are written; a closed spool
// refuses them all.
func TestAppendBatch(t *testing.T) {
	big := make([]byte, 1<<20)
	for _, tc := range []struct {
		name   string
		ms     []Message
		closed bool
		// wantErr: the error each message gets (nil: written).
		wantErr []error
	}{
		{name: "all written", ms: []Message{{Topic: "a", Payload: []byte("0")}, {Topic: "b", Payload: []byte("1"), QoS: 1}, {Topic: "a", Payload: []byte("2"), Retain: true}}},
		{name: "one too large", ms: []Message{{Topic: "a", Payload: []byte("0")}, {Topic: "a", Payload: big}, {Topic: "a", Payload: []byte("2")}}, wantErr: []error{nil, ErrTooLarge, nil}},
		{name: "closed", ms: []Message{{Topic: "a", Payload: []byte("0")}, {Topic: "a", Payload: []byte("1")}}, closed: true, wantErr: []error{ErrClosed, ErrClosed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, Options{Dir: t.TempDir(), Fsync: FsyncAlways, MaxBytes: 1 << 20})
			if tc.closed {
				s.Close()
			}
			before := s.Stats()
			errs := s.AppendBatch(ctx(t), tc.ms)
			var written []Message
			for i, m := range tc.ms {
				var got, want error
				if errs != nil {
					got = errs[i]
				}
				if tc.wantErr != nil {
					want = tc.wantErr[i]
				}
				if (got == nil) != (want == nil) || (want != nil && !errors.Is(got, want)) {
					t.Fatalf("message %d: error %v, want %v", i, got, want)
				}
				if got == nil {
					written = append(written, m)
				}
			}
			if tc.closed {
				return
			}
			st := s.Stats()
			if w, f := st.Writes-before.Writes, st.Fsyncs-before.Fsyncs; w != 1 || f != 1 {
				t.Fatalf("%d writes and %d fsyncs for one batch, want 1 and 1", w, f)
			}
			for i, w := range written {
				m, err := s.Next(ctx(t))
				if err != nil {
					t.Fatal(err)
				}
				if m.ID != uint64(i+1) || m.Topic != w.Topic || string(m.Payload) != string(w.Payload) || m.QoS != w.QoS || m.Retain != w.Retain {
					t.Fatalf("message %d = %+v, want %s", i, m, fmt.Sprintf("%s %q", w.Topic, w.Payload))
				}
			}
		})
	}
}
