//go:build !arm

package main

// benchBuiltIn reports whether this build has `quiot bench` (and the quick
// bench `quiot demo` ends with). Every build but 32-bit ARM has it; see
// pibuild_arm.go for what the Pi build leaves out.
const benchBuiltIn = true
