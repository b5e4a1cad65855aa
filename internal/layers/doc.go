// Package layers holds the test that keeps quiot's import graph layered
// (docs/CONTRIBUTING.md, "Layout"): internal/ is the ground floor and imports
// nothing above it; the broker's packages and ovsprobe's never import the
// device's; the device's libraries (client, spool, hw) never import the
// broker's. The quiot main package (device/) and its bench harness sit on top
// and may import everything. It has no code of its own.
package layers
