// Package version holds the build version, set at link time with
// -ldflags "-X github.com/quiot/quiot/internal/version.Version=...".
package version

import "runtime/debug"

// Version is the release version; "dev" for builds without -ldflags.
var Version = "dev"

// String returns the version with the Go toolchain and VCS revision when known.
func String() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		v += " (" + bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += ", " + s.Value[:12]
			}
		}
		v += ")"
	}
	return v
}
