package bench_test

import (
	"fmt"

	"github.com/quiot/quiot/device/bench"
)

func ExampleSpec_Expand() {
	spec := bench.Spec{
		Protos:   []string{bench.ProtoH3, bench.ProtoMQTT},
		Modes:    []string{bench.ModeRequest, bench.ModeStream},
		Tunings:  []bench.Tuning{{Name: "lean", Profile: "lean"}},
		Profiles: []string{"nbiot"},
		Payloads: []int{256},
		Repeat:   2,
		Count:    10,
	}
	if err := spec.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	for _, j := range spec.Expand() {
		fmt.Println(j.ID())
	}
	// Output:
	// h3-request-lean-nbiot-256-r1
	// h3-stream-lean-nbiot-256-r1
	// mqtt-mqtt-lean-nbiot-256-r1
	// h3-request-lean-nbiot-256-r2
	// h3-stream-lean-nbiot-256-r2
	// mqtt-mqtt-lean-nbiot-256-r2
}

func ExampleCI95() {
	e := bench.CI95([]float64{3, 4, 5, 6, 7})
	fmt.Printf("median %.1f, mean %.1f, 95 %% CI [%.2f, %.2f]\n", e.Median, e.Mean, e.Lo, e.Hi)
	// Output: median 5.0, mean 5.0, 95 % CI [3.04, 6.96]
}
