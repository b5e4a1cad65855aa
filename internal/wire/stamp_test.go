package wire

import (
	"testing"
	"time"
)

func TestParseStamp(t *testing.T) {
	now := time.Date(2026, 12, 6, 18, 0, 0, 123456789, time.UTC).UnixNano()
	cases := []struct {
		name  string
		props map[string]string
		want  int64
	}{
		{"compact", map[string]string{MQTTStampProperty: FormatStamp(now)}, now},
		{"decimal", map[string]string{MQTTTimeProperty: "1780000000000000000"}, 1780000000000000000},
		{"compact wins", map[string]string{MQTTStampProperty: FormatStamp(now), MQTTTimeProperty: "5"}, now},
		{"none", map[string]string{}, 0},
		{"malformed compact", map[string]string{MQTTStampProperty: "not/base36"}, 0},
		{"malformed compact does not fall back", map[string]string{MQTTStampProperty: "!", MQTTTimeProperty: "5"}, 0},
		{"malformed decimal", map[string]string{MQTTTimeProperty: "12ab"}, 0},
		{"negative", map[string]string{MQTTStampProperty: "-zz"}, 0},
		{"zero", map[string]string{MQTTTimeProperty: "0"}, 0},
		{"overflow", map[string]string{MQTTStampProperty: "zzzzzzzzzzzzzzzzzzzz"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseStamp(func(k string) string { return c.props[k] }); got != c.want {
				t.Errorf("ParseStamp = %d, want %d", got, c.want)
			}
		})
	}
}

// TestStampSize pins the compact form's size: 12 characters until 2120,
// and the property 15 bytes shorter than the decimal one.
func TestStampSize(t *testing.T) {
	for _, y := range []int{2026, 2119} {
		if n := len(FormatStamp(time.Date(y, 12, 31, 23, 59, 59, 999999999, time.UTC).UnixNano())); n != 12 {
			t.Errorf("year %d: %d characters, want 12", y, n)
		}
	}
	// id byte, then a 2-byte length before each of key and value.
	compact := 1 + 2 + len(MQTTStampProperty) + 2 + 12
	decimal := 1 + 2 + len(MQTTTimeProperty) + 2 + 19
	if compact != 19 || decimal != 34 {
		t.Errorf("property sizes %d and %d, want 19 and 34", compact, decimal)
	}
}

func FuzzParseStamp(f *testing.F) {
	f.Add("", "")
	f.Add(FormatStamp(time.Now().UnixNano()), "")
	f.Add("", "1780000000000000000")
	f.Fuzz(func(t *testing.T, compact, decimal string) {
		ns := ParseStamp(func(k string) string {
			if k == MQTTStampProperty {
				return compact
			}
			return decimal
		})
		if ns < 0 {
			t.Fatalf("negative stamp %d", ns)
		}
		if ns > 0 {
			back := ParseStamp(func(k string) string {
				if k == MQTTStampProperty {
					return FormatStamp(ns)
				}
				return ""
			})
			if back != ns {
				t.Fatalf("%d formats as %q, which parses to %d", ns, FormatStamp(ns), back)
			}
		}
	})
}
