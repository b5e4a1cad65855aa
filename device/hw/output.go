package hw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
)

// Output drives a GPIO output (an LED, a relay) from message payloads.
type Output struct {
	mu    sync.Mutex
	pin   gpio.PinOut
	level gpio.Level
}

// OpenOutput opens the GPIO output a --gpio-out flag names (e.g. GPIO27),
// driven low at first. It calls Init first.
func OpenOutput(name string) (*Output, error) {
	if _, err := Init(); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("gpio output needs a pin name, e.g. GPIO27")
	}
	p := gpioreg.ByName(name)
	if p == nil {
		return nil, fmt.Errorf("no GPIO pin %q on this host (%s)", name, pinNames())
	}
	return NewOutput(p)
}

// NewOutput drives pin low and returns its driver.
func NewOutput(pin gpio.PinOut) (*Output, error) {
	if err := pin.Out(gpio.Low); err != nil {
		return nil, fmt.Errorf("gpio %s as output: %w", pin.Name(), err)
	}
	return &Output{pin: pin, level: gpio.Low}, nil
}

// Apply drives the output for one message and returns the new level. A
// payload that names a level sets it (see ParseLevel); any other payload
// toggles the output.
func (o *Output) Apply(payload []byte) (gpio.Level, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := ParseLevel(payload)
	if !ok {
		l = !o.level
	}
	if err := o.pin.Out(l); err != nil {
		return o.level, fmt.Errorf("gpio %s: %w", o.pin.Name(), err)
	}
	o.level = l
	return l, nil
}

// Close drives the output low.
func (o *Output) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.pin.Out(gpio.Low); err != nil {
		return fmt.Errorf("gpio %s: %w", o.pin.Name(), err)
	}
	o.level = gpio.Low
	return nil
}

// ParseLevel reads a level from a payload: 1/0, on/off, high/low, true/false
// (any case, surrounding space ignored), or a JSON object with "level" as
// the GPIO edge sensor publishes it ({"pin":"GPIO17","level":1}). ok is
// false when the payload names no level.
func ParseLevel(payload []byte) (level gpio.Level, ok bool) {
	s := strings.ToLower(string(bytes.TrimSpace(payload)))
	switch s {
	case "1", "on", "high", "true":
		return gpio.High, true
	case "0", "off", "low", "false":
		return gpio.Low, true
	}
	if strings.HasPrefix(s, "{") {
		var v struct {
			Level *json.RawMessage `json:"level"`
		}
		if json.Unmarshal(payload, &v) == nil && v.Level != nil {
			var raw any
			if json.Unmarshal(*v.Level, &raw) == nil {
				return ParseLevel([]byte(fmt.Sprint(raw)))
			}
		}
	}
	return gpio.Low, false
}
