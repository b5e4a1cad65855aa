//go:build !race

package mqttquic

// raceDetector reports whether the tests run under the race detector.
const raceDetector = false
