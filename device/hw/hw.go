// Package hw is quiot's access to a small board's hardware through periph.io:
// which board it runs on and which drivers loaded, the SoC temperature, GPIO
// inputs (edges) and outputs.
//
// periph's host drivers register themselves; Init loads them once and reports
// what loaded, what was skipped and what failed — partial hardware is normal
// (an amd64 laptop has no GPIO, a Pi without the thermal driver has no
// temperature). Board detection that only makes sense on ARM lives in
// board_arm.go, with a stub in board_other.go, so the package builds and tests
// everywhere; tests use periph's gpiotest fakes.
package hw

import (
	"fmt"
	"runtime"
	"sort"
	"sync"

	"periph.io/x/conn/v3/driver/driverreg"
)

// Info describes the host as periph sees it.
type Info struct {
	// Board is the board's name, e.g. "Raspberry Pi Zero W Rev 1.1", or a
	// description such as "none detected (amd64)".
	Board string
	// RaspberryPi reports whether the Raspberry Pi firmware driver is present.
	RaspberryPi bool
	// Loaded, Skipped and Failed are periph's host drivers by outcome;
	// Skipped and Failed entries read "driver: reason".
	Loaded, Skipped, Failed []string
}

var (
	initOnce sync.Once
	initInfo *Info
	initErr  error
)

// Init loads periph's host drivers (once per process) and detects the board.
// A driver that fails is reported in Info.Failed, not as an error; the error
// is for periph's registry itself failing.
func Init() (*Info, error) {
	initOnce.Do(func() {
		st, err := driverreg.Init()
		if err != nil {
			initErr = fmt.Errorf("periph host init: %w", err)
			return
		}
		initInfo = infoFrom(st)
	})
	return initInfo, initErr
}

func infoFrom(st *driverreg.State) *Info {
	in := &Info{}
	for _, d := range st.Loaded {
		in.Loaded = append(in.Loaded, d.String())
	}
	for _, f := range st.Skipped {
		in.Skipped = append(in.Skipped, fmt.Sprintf("%s: %v", f.D, f.Err))
	}
	for _, f := range st.Failed {
		in.Failed = append(in.Failed, fmt.Sprintf("%s: %v", f.D, f.Err))
	}
	sort.Strings(in.Loaded)
	sort.Strings(in.Skipped)
	sort.Strings(in.Failed)
	model, rpi := detectBoard()
	in.RaspberryPi = rpi
	in.Board = describeBoard(model, rpi, runtime.GOARCH)
	return in
}

// describeBoard names the board from the device-tree model, whether the
// Raspberry Pi firmware is present, and the architecture.
func describeBoard(model string, rpi bool, goarch string) string {
	if model == "<unknown>" { // periph's answer when /proc/device-tree/model is absent
		model = ""
	}
	switch {
	case model != "":
		return model
	case rpi:
		return "Raspberry Pi (model unknown)"
	default:
		return "none detected (" + goarch + ")"
	}
}
