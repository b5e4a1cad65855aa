package model_test

import (
	"fmt"

	"github.com/quiot/quiot/probe/model"
)

// Fit a delay model to measured conditions and predict an unmeasured one.
func ExampleFit() {
	var obs []model.Observation
	for _, size := range []float64{64, 512, 1024, 1500} {
		for _, rate := range []float64{1, 2, 5, 10} {
			x := map[string]float64{"size_bytes": size, "rate_kpps": rate}
			obs = append(obs, model.Observation{X: x, Y: 20 + 0.01*size + 3*rate})
		}
	}
	m, err := model.Fit(obs, model.FitOptions{Transform: "none"})
	if err != nil {
		panic(err)
	}
	y, _ := m.Predict(map[string]float64{"size_bytes": 800, "rate_kpps": 4})
	fmt.Printf("%.1f us, terms %v\n", y, m.Terms)
	// Output: 40.0 us, terms [intercept rate_kpps size_bytes]
}
