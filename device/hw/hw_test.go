package hw

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/gpio/gpiotest"
	"periph.io/x/conn/v3/physic"
)

func TestInit(t *testing.T) {
	in, err := Init()
	if err != nil {
		t.Fatal(err)
	}
	if in.Board == "" {
		t.Error("empty board")
	}
	if len(in.Loaded)+len(in.Skipped)+len(in.Failed) == 0 {
		t.Error("periph reported no drivers at all")
	}
	t.Logf("board %q; loaded %v; skipped %d; failed %v", in.Board, in.Loaded, len(in.Skipped), in.Failed)
	again, _ := Init()
	if again != in {
		t.Error("Init ran twice")
	}
}

func TestDescribeBoard(t *testing.T) {
	tests := []struct {
		model string
		rpi   bool
		want  string
	}{
		{"Raspberry Pi Zero W Rev 1.1", true, "Raspberry Pi Zero W Rev 1.1"},
		{"", true, "Raspberry Pi (model unknown)"},
		{"", false, "none detected (amd64)"},
		{"<unknown>", false, "none detected (amd64)"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := describeBoard(tc.model, tc.rpi, "amd64"); got != tc.want {
				t.Errorf("got %q", got)
			}
		})
	}
}

// fakeThermo is a physic.SenseEnv reporting a fixed temperature.
type fakeThermo struct {
	c      float64
	err    error
	halted bool
}

func (f *fakeThermo) String() string { return "fake" }
func (f *fakeThermo) Halt() error    { f.halted = true; return nil }
func (f *fakeThermo) Sense(e *physic.Env) error {
	if f.err != nil {
		return f.err
	}
	e.Temperature = physic.ZeroCelsius + physic.Temperature(f.c*float64(physic.Celsius))
	return nil
}
func (f *fakeThermo) SenseContinuous(time.Duration) (<-chan physic.Env, error) {
	return nil, errors.New("no")
}
func (f *fakeThermo) Precision(*physic.Env) {}

func TestThermal(t *testing.T) {
	f := &fakeThermo{c: 48.3125}
	s := NewThermal(f, "thermal_zone0")
	if !s.Paced() {
		t.Error("thermal should be paced")
	}
	b, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var r ThermalReading
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Sensor != "thermal_zone0" || r.Celsius < 48.31 || r.Celsius > 48.32 {
		t.Errorf("reading %s", b)
	}
	f.err = errors.New("EIO")
	if _, err := s.Next(context.Background()); err == nil || !strings.Contains(err.Error(), "thermal_zone0") {
		t.Errorf("error = %v", err)
	}
	if err := s.Close(); err != nil || !f.halted {
		t.Error("Close did not halt")
	}
}

func fakePin(t *testing.T, name string) *gpiotest.Pin {
	t.Helper()
	p := &gpiotest.Pin{N: name, Num: 17, EdgesChan: make(chan gpio.Level, 16)}
	if err := gpioreg.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gpioreg.Unregister(name) })
	return p
}

func TestEdges(t *testing.T) {
	p := fakePin(t, "GPIOT17")
	s, err := OpenSensor("gpio:GPIOT17")
	if err != nil {
		t.Fatal(err)
	}
	if s.Paced() {
		t.Error("edges should not be paced")
	}
	if p.P != gpio.PullUp {
		t.Errorf("pull %v, want up", p.P)
	}
	ctx := context.Background()
	next := func() EdgeReading {
		t.Helper()
		b, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var r EdgeReading
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := next(); r != (EdgeReading{Pin: "GPIOT17", Level: 1}) {
		t.Errorf("initial %+v", r)
	}
	// A button press: falling edge, a bounce back to low, rising edge.
	p.EdgesChan <- gpio.Low
	p.EdgesChan <- gpio.Low
	p.EdgesChan <- gpio.High
	if r := next(); r.Level != 0 {
		t.Errorf("press %+v", r)
	}
	if r := next(); r.Level != 1 {
		t.Errorf("release %+v (bounce reported?)", r)
	}
	// Next returns when the context ends.
	cctx, cancel := context.WithCancel(ctx)
	s.(*Edges).Poll = time.Millisecond
	cancel()
	if _, err := s.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenSensorErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"humidity", "unknown sensor"},
		{"gpio", "needs a pin name"},
		{"gpio:NOPE99", `no GPIO pin "NOPE99"`},
		{"thermal:nozone", `thermal sensor "nozone"`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := OpenSensor(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOutput(t *testing.T) {
	p := fakePin(t, "GPIOT27")
	p.L = gpio.High
	o, err := OpenOutput("GPIOT27")
	if err != nil {
		t.Fatal(err)
	}
	if p.Read() != gpio.Low {
		t.Error("output not driven low at open")
	}
	steps := []struct {
		payload string
		want    gpio.Level
	}{
		{"on", gpio.High},
		{"ON\n", gpio.High},
		{"0", gpio.Low},
		{"anything", gpio.High}, // toggles
		{"anything", gpio.Low},
		{`{"pin":"GPIO17","level":1}`, gpio.High},
		{`{"pin":"GPIO17","level":0}`, gpio.Low},
		{`{"level":"on"}`, gpio.High},
		{"false", gpio.Low},
	}
	for _, st := range steps {
		l, err := o.Apply([]byte(st.payload))
		if err != nil {
			t.Fatal(err)
		}
		if l != st.want || p.Read() != st.want {
			t.Errorf("after %q: level %v pin %v, want %v", st.payload, l, p.Read(), st.want)
		}
	}
	_, _ = o.Apply([]byte("1"))
	if err := o.Close(); err != nil || p.Read() != gpio.Low {
		t.Error("Close did not drive low")
	}
	if _, err := OpenOutput("NOPE98"); err == nil {
		t.Error("unknown pin accepted")
	}
}

func FuzzParseLevel(f *testing.F) {
	for _, s := range []string{"1", "off", `{"level":1}`, `{"level":{}}`, "{", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseLevel(b)
	})
}
