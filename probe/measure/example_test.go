package measure_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/quiot/quiot/probe/measure"
)

// Measure one condition through a switch whose ports veth-in and veth-out
// lead to the namespaces gen (sender) and sink (receiver at 10.0.0.2).
func ExampleRun() {
	r, err := measure.Run(context.Background(), measure.Options{
		IngressIf: "veth-in", EgressIf: "veth-out",
		GenNamespace: "gen", SinkNamespace: "sink",
		Dst: netip.MustParseAddrPort("10.0.0.2:9000"),
	}, measure.Condition{Size: 512, Rate: 5000, Flows: 10, Duration: 2 * time.Second, Warmup: 200 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(r.Delays), r.Lost, r.IngressRingDrops+r.EgressRingDrops, r.FirstDelay)
}
