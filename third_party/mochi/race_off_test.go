//go:build !race

package mqtt

// raceEnabled: see race_on_test.go.
const raceEnabled = false
