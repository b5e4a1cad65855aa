package hw

// Same as board_arm.go, for 64-bit ARM (Pi 3, 4, 5, Zero 2 W on a 64-bit OS).

import (
	"periph.io/x/host/v3/distro"
	"periph.io/x/host/v3/rpi"
)

// detectBoard reads the device-tree model (/proc/device-tree/model) and asks
// periph whether this is a Raspberry Pi.
func detectBoard() (model string, isRPi bool) {
	return distro.DTModel(), rpi.Present()
}
