//go:build race

package bridge_test

// raceDetector reports whether the tests run under the race detector.
const raceDetector = true
