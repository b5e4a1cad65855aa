//go:build !arm && !nobench

package main

// benchBuiltIn reports whether this build has `quiot bench` (and the quick
// bench `quiot demo` ends with). Every build but 32-bit ARM and the tag
// nobench has it; see pibuild.go for what those leave out.
const benchBuiltIn = true
