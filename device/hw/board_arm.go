package hw

import (
	"periph.io/x/host/v3/distro"
	"periph.io/x/host/v3/rpi"
)

// detectBoard reads the device-tree model (/proc/device-tree/model) and asks
// periph whether this is a Raspberry Pi.
func detectBoard() (model string, isRPi bool) {
	return distro.DTModel(), rpi.Present()
}
