//go:build race

package client

// raceDetector reports whether the tests run under the race detector.
const raceDetector = true
