package bench

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParseRoleMetrics feeds arbitrary bytes to the role-metrics parser
// and Combine: errors are fine, panics are not.
func FuzzParseRoleMetrics(f *testing.F) {
	f.Add([]byte(`{"role":"pub","handshake_ms":1.5,"messages_sent":3,"diag":{"frames_sent":{"ACK":2}}}`))
	f.Add([]byte(`{"latency_ms":{"p50":1},"latencies_ms":[1,2,"x"],"messages_received":2}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseRoleMetrics(b)
		if err != nil {
			return
		}
		var s Sample
		Combine(&s, d, d)
	})
}

// FuzzReadCSV feeds arbitrary text to the runs.csv reader; what it
// accepts must write back.
func FuzzReadCSV(f *testing.F) {
	_, samples, _ := synthetic(1, false)
	var buf bytes.Buffer
	if err := WriteCSV(&buf, samples[:3]); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.String())
	f.Add("proto,publish_mode\nh3,request\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteCSV(&out, got); err != nil {
			t.Fatalf("accepted csv does not write back: %v", err)
		}
	})
}

// FuzzParseSizes checks the payload list parser never panics and returns
// only positive sizes.
func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"16,256,1024", "1k", "", ",,", "-1", "9999999999999999999k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseSizes(in)
		if err != nil {
			return
		}
		for _, n := range got {
			if n < 1 {
				t.Fatalf("ParseSizes(%q) gave %d", in, n)
			}
		}
	})
}
