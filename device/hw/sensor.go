package hw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/host/v3/sysfs"
)

// Sensor yields the payloads a publisher sends.
type Sensor interface {
	// Next blocks until the next reading and returns it as a payload. It
	// returns ctx.Err() when ctx ends first.
	Next(ctx context.Context) ([]byte, error)
	// Paced reports whether the publisher should pace readings by its rate
	// (a thermometer can be read any time) or send each one as soon as Next
	// returns (edges of an input happen when they happen).
	Paced() bool
	// Close releases the hardware.
	Close() error
}

// OpenSensor opens the sensor a --sensor flag names:
//
//	thermal        the SoC temperature (the first CPU/SoC thermal zone)
//	thermal:NAME   a named sysfs thermal sensor, e.g. thermal:thermal_zone0
//	gpio:NAME      edges of a GPIO input, e.g. gpio:GPIO17 (pulled up)
//
// It calls Init first.
func OpenSensor(spec string) (Sensor, error) {
	kind, name, _ := strings.Cut(spec, ":")
	if _, err := Init(); err != nil {
		return nil, err
	}
	switch kind {
	case "thermal":
		t, err := findThermal(name)
		if err != nil {
			return nil, err
		}
		return NewThermal(t, t.String()), nil
	case "gpio":
		if name == "" {
			return nil, errors.New("sensor gpio needs a pin name, e.g. gpio:GPIO17")
		}
		p := gpioreg.ByName(name)
		if p == nil {
			return nil, fmt.Errorf("no GPIO pin %q on this host (%s)", name, pinNames())
		}
		return NewEdges(p, gpio.PullUp)
	default:
		return nil, fmt.Errorf("unknown sensor %q (want thermal, thermal:NAME or gpio:NAME)", spec)
	}
}

func pinNames() string {
	all := gpioreg.All()
	if len(all) == 0 {
		return "none found"
	}
	names := make([]string, 0, len(all))
	for _, p := range all {
		names = append(names, p.Name())
	}
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	return "pins: " + strings.Join(names, ", ")
}

// socZoneTypes are the sysfs thermal zone types of SoC/CPU sensors: the
// Raspberry Pi's bcm2835_thermal reports "cpu-thermal".
var socZoneTypes = []string{"cpu-thermal", "cpu_thermal", "soc-thermal", "soc_thermal", "bcm2835_thermal", "x86_pkg_temp"}

func findThermal(name string) (*sysfs.ThermalSensor, error) {
	if name != "" {
		t, err := sysfs.ThermalSensorByName(name)
		if err != nil {
			return nil, fmt.Errorf("thermal sensor %q: %w", name, err)
		}
		return t, nil
	}
	if len(sysfs.ThermalSensors) == 0 {
		return nil, errors.New("no thermal sensor on this host (no /sys/class/thermal zones)")
	}
	pick := sysfs.ThermalSensors[0]
	for _, t := range sysfs.ThermalSensors {
		for _, ty := range socZoneTypes {
			if t.Type() == ty {
				pick = t
				break
			}
		}
	}
	t, err := sysfs.ThermalSensorByName(pick.String())
	if err != nil {
		return nil, fmt.Errorf("thermal sensor %s: %w", pick, err)
	}
	return t, nil
}

// ThermalReading is the payload of the thermal sensor (JSON).
type ThermalReading struct {
	Sensor  string  `json:"sensor"`
	Celsius float64 `json:"celsius"`
}

// Thermal reads a temperature sensor.
type Thermal struct {
	dev  physic.SenseEnv
	name string
}

// NewThermal wraps a periph temperature sensor (sysfs.ThermalSensor, or a
// fake in tests); name goes into each reading.
func NewThermal(dev physic.SenseEnv, name string) *Thermal {
	return &Thermal{dev: dev, name: name}
}

// Next reads the temperature now: {"sensor":"thermal_zone0","celsius":48.3}.
func (t *Thermal) Next(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var e physic.Env
	if err := t.dev.Sense(&e); err != nil {
		return nil, fmt.Errorf("read %s: %w", t.name, err)
	}
	c := e.Temperature.Celsius()
	return json.Marshal(ThermalReading{Sensor: t.name, Celsius: float64(int64(c*1000+0.5)) / 1000})
}

// Paced is true: the publisher reads the thermometer at its own rate.
func (t *Thermal) Paced() bool { return true }

// Close halts the sensor.
func (t *Thermal) Close() error { return t.dev.Halt() }

// EdgeReading is the payload of the GPIO edge sensor (JSON); Level is 0 or 1.
type EdgeReading struct {
	Pin   string `json:"pin"`
	Level int    `json:"level"`
}

// Edges reports the edges of a GPIO input.
type Edges struct {
	pin  gpio.PinIn
	last gpio.Level
	// Poll bounds how long one WaitForEdge blocks, so Next notices ctx.
	Poll      time.Duration
	sentFirst bool
}

// NewEdges configures pin as an input with pull, detecting both edges.
func NewEdges(pin gpio.PinIn, pull gpio.Pull) (*Edges, error) {
	if err := pin.In(pull, gpio.BothEdges); err != nil {
		return nil, fmt.Errorf("gpio %s as input with edge detection: %w", pin.Name(), err)
	}
	return &Edges{pin: pin, last: pin.Read(), Poll: 200 * time.Millisecond}, nil
}

// Next returns the pin's level at once the first time (so subscribers learn
// the state), then blocks until the level changes: {"pin":"GPIO17","level":1}.
// Bounces that leave the level unchanged are not reported.
func (e *Edges) Next(ctx context.Context) ([]byte, error) {
	if !e.sentFirst {
		e.sentFirst = true
		return e.payload(e.last)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.pin.WaitForEdge(e.Poll) {
			continue
		}
		if l := e.pin.Read(); l != e.last {
			e.last = l
			return e.payload(l)
		}
	}
}

func (e *Edges) payload(l gpio.Level) ([]byte, error) {
	r := EdgeReading{Pin: e.pin.Name()}
	if l == gpio.High {
		r.Level = 1
	}
	return json.Marshal(r)
}

// Paced is false: each edge is sent when it happens.
func (e *Edges) Paced() bool { return false }

// Close turns edge detection off.
func (e *Edges) Close() error {
	if err := e.pin.In(gpio.PullNoChange, gpio.NoEdge); err != nil {
		return fmt.Errorf("gpio %s: %w", e.pin.Name(), err)
	}
	return nil
}
