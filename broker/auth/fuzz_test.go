package auth

import (
	"testing"
)

// FuzzParse feeds arbitrary ACL files to Parse and Convert: neither
// panics; a file that loads answers Allow for any identity without
// panicking, and what Convert returns loads without plain-text warnings.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("[anonymous]\npublish = [\"devices/%u/#\"]\n"))
	f.Add([]byte("[[user]]\nname = \"a\"\n[[token]]\nuser = \"a\"\nsha256 = \"e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8\"\nexpires = 2027-01-01T00:00:00Z\n"))
	f.Add([]byte("[[user]]\nname = \"a\"\n[[password]]\nuser = \"a\"\nhash = \"$2a$04$abcdefghijklmnopqrstuu5bSdeF3DvIrrw/sm1oq5cN6WhSH.S3q\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Parse(b)
		if err != nil {
			return
		}
		for _, id := range []string{"", "a", "#", "sensor-1"} {
			a.Allow(id, Publish, "a/b")
			a.Allow(id, Subscribe, "a/#")
		}
		out, _, err := Convert(b, 4)
		if err != nil {
			return
		}
		c, err := Parse(out)
		if err != nil {
			t.Fatalf("Convert made a file that does not load: %v\n%s", err, out)
		}
		if w := c.Warnings(); len(w) > 0 {
			t.Fatalf("Convert left plain text: %q", w)
		}
	})
}
