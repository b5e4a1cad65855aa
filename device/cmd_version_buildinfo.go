package main

import "runtime/debug"

// buildSettings returns the binary's build settings as key/value pairs.
func buildSettings() [][2]string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	out := make([][2]string, 0, len(bi.Settings))
	for _, s := range bi.Settings {
		out = append(out, [2]string{s.Key, s.Value})
	}
	return out
}
