package linkprofile

import "testing"

// FuzzParse: any input gives profiles that validate, or an error; never a
// panic.
func FuzzParse(f *testing.F) {
	f.Add(profilesTOML)
	f.Add([]byte("[x]\ndelay = \"1ms\"\n[x.up]\nrate_kbit = 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "fuzz")
		if err != nil {
			return
		}
		for _, p := range s.All() {
			if err := p.Validate(); err != nil {
				t.Errorf("Parse accepted an invalid profile: %v", err)
			}
			_ = NetemArgs(p.Up)
		}
	})
}
