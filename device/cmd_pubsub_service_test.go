package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/gpio/gpiotest"

	"github.com/quiot/quiot/device/hw"
)

// waitBuffer is a goroutine-safe buffer whose wait returns once the text
// contains a pattern.
type waitBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newWaitBuffer() *waitBuffer { return &waitBuffer{changed: make(chan struct{}, 1)} }

func (w *waitBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return w.b.Write(p)
}

func (w *waitBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *waitBuffer) wait(t *testing.T, pattern string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for !strings.Contains(w.String(), pattern) {
		select {
		case <-w.changed:
		case <-timeout:
			t.Fatalf("no %q in:\n%s", pattern, w.String())
		}
	}
}

func registerFakePin(t *testing.T, p *gpiotest.Pin) {
	t.Helper()
	if err := gpioreg.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gpioreg.Unregister(p.N) })
}

// TestGPIOButtonToLED: `quiot pub --sensor gpio:IN` publishes a button's
// edges, `quiot sub --gpio-out OUT` drives an LED from them, over a real
// broker, with periph's gpiotest pins standing in for the hardware.
func TestGPIOButtonToLED(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	in := &gpiotest.Pin{N: "GPIOQ5", Num: 5, EdgesChan: make(chan gpio.Level)} // unbuffered: a send waits for WaitForEdge
	out := &gpiotest.Pin{N: "GPIOQ6", Num: 6}
	registerFakePin(t, in)
	registerFakePin(t, out)

	b := brokertest.Start(t, nil, nil)
	ca := b.PKI.CAFile(t)
	common := []string{"--config", "", "--broker", b.URL, "--ca", ca, "--topic", "pins/button"}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subOut, subErr := newWaitBuffer(), newWaitBuffer()
	subDone := make(chan error, 1)
	go func() {
		subDone <- runSub(ctx, append(common, "--count", "3", "--gpio-out", "GPIOQ6", "--format", "raw", "--log-level", "debug"), subOut, subErr)
	}()
	subErr.wait(t, "subscribed")

	pubDone := make(chan error, 1)
	go func() {
		pubDone <- runPub(ctx, append(common, "--sensor", "gpio:GPIOQ5", "--count", "3", "--quiet"), io.Discard, io.Discard)
	}()
	// Press and release once the publisher has configured the input (its
	// pull-up is set under the pin's lock, after which In has flushed).
	go func() {
		for {
			in.Lock()
			ready := in.P == gpio.PullUp
			in.Unlock()
			if ready {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond): // readiness poll
			}
		}
		for _, l := range []gpio.Level{gpio.Low, gpio.High} {
			select {
			case in.EdgesChan <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := <-pubDone; err != nil {
		t.Fatalf("pub: %v", err)
	}
	if err := <-subDone; err != nil {
		t.Fatalf("sub: %v\n%s", err, subErr.String())
	}
	var levels []int
	dec := json.NewDecoder(strings.NewReader(subOut.String()))
	for dec.More() {
		var r hw.EdgeReading
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v in %q", err, subOut.String())
		}
		if r.Pin != "GPIOQ5" {
			t.Errorf("pin %q", r.Pin)
		}
		levels = append(levels, r.Level)
	}
	if len(levels) != 3 || levels[0] != 1 || levels[1] != 0 || levels[2] != 1 {
		t.Errorf("published levels %v, want [1 0 1] (idle high, press, release)", levels)
	}
	driven := regexp.MustCompile(`msg="gpio output" level=(\w+)`).FindAllStringSubmatch(subErr.String(), -1)
	var got []string
	for _, m := range driven {
		got = append(got, m[1])
	}
	if strings.Join(got, ",") != "High,Low,High" {
		t.Errorf("output driven %v, want High,Low,High\n%s", got, subErr.String())
	}
	if out.Read() != gpio.Low {
		t.Error("output not driven low when sub ended")
	}
}

func TestPubSensorErrors(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	b := brokertest.Start(t, nil, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sensor", "gpio:NOPE42"}, `no GPIO pin "NOPE42"`},
		{[]string{"--sensor", "barometer"}, "unknown sensor"},
		{[]string{"--sensor", "thermal", "--payload", "x"}, "--sensor replaces --payload"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := runPub(context.Background(), append([]string{"--config", "", "--broker", b.URL, "--insecure", "--topic", "t", "--quiet"}, tc.args...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	err := runSub(context.Background(), []string{"--config", "", "--broker", b.URL, "--insecure", "--topic", "t", "--gpio-out", "NOPE43"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `no GPIO pin "NOPE43"`) {
		t.Errorf("sub --gpio-out: %v", err)
	}
}

func TestApplySensor(t *testing.T) {
	tests := []struct {
		name              string
		paced             bool
		rateSet, countSet bool
		wantRate          float64
		wantCount         int
	}{
		{"thermal defaults", true, false, false, 1, 0},
		{"thermal explicit", true, true, true, 5, 7},
		{"edges", false, true, false, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pubPlan{rate: 5, count: 7, inflight: 4}
			applySensor(fakeSensor{paced: tc.paced}, &p, tc.rateSet, tc.countSet)
			if p.rate != tc.wantRate || p.count != tc.wantCount || p.inflight != 1 || p.next == nil {
				t.Errorf("plan %+v", p)
			}
		})
	}
}

type fakeSensor struct{ paced bool }

func (f fakeSensor) Next(context.Context) ([]byte, error) { return []byte("x"), nil }
func (f fakeSensor) Paced() bool                          { return f.paced }
func (f fakeSensor) Close() error                         { return nil }
