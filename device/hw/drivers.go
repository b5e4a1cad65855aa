package hw

// quiot runs on Raspberry Pis, so it registers only the periph drivers a Pi
// uses instead of host.Init's full set (Allwinner, AM335x, BeagleBone,
// C.H.I.P., ODROID-C1, Pine64): that keeps the ARMv6 binary inside its 12 MB
// budget. Other boards still get GPIO through the character device
// (gpioioctl) and sysfs drivers.
import (
	_ "periph.io/x/host/v3/bcm283x"
	_ "periph.io/x/host/v3/gpioioctl"
	_ "periph.io/x/host/v3/rpi"
	_ "periph.io/x/host/v3/sysfs"
)
