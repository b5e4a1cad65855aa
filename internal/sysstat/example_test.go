package sysstat_test

import (
	"fmt"

	"github.com/quiot/quiot/internal/sysstat"
)

func ExampleSampler() {
	s, err := sysstat.NewSampler(nil) // this process, /proc
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Start(); err != nil {
		fmt.Println(err)
		return
	}
	// ... the work to measure ...
	u, err := s.Stop()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(u.PeakRSSKiB > 0)
	// Output: true
}
