//go:build !arm && !arm64

package hw

// detectBoard: boards with a device tree and GPIO header are ARM here; on
// other architectures there is nothing to detect.
func detectBoard() (model string, isRPi bool) {
	return "", false
}
