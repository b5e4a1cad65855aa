//go:build arm

package htmlreport

// BuiltIn reports whether this binary renders HTML reports: not on 32-bit
// ARM (see the package comment).
const BuiltIn = false

// WriteDir does nothing on 32-bit ARM: the markdown renderer is left out of
// the Pi binary. Render the report on another host with `quiot bench
// --report DIR`.
func WriteDir(string) error { return nil }
