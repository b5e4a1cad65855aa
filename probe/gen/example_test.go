package gen_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/quiot/quiot/probe/gen"
)

// Send 10,000 Poisson-spaced 256-byte frames per second over 16 flows from
// namespace "gen" to a sink in namespace "sink".
func ExampleRun() {
	dst := netip.MustParseAddrPort("10.0.0.2:9000")
	sink, err := gen.NewSink("sink", dst)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sink.Close()
	st, err := gen.Run(context.Background(), gen.Options{
		Dst: dst, Namespace: "gen", Size: 256, Rate: 10000, Poisson: true, Flows: 16, Duration: 5 * time.Second,
	})
	fmt.Println(st.Sent, st.Errors, err)
}

func ExampleDecode() {
	p := make([]byte, gen.HeaderLen)
	_ = gen.Encode(p, gen.Header{Seq: 7, Flow: 2})
	h, err := gen.Decode(p)
	fmt.Println(h.Seq, h.Flow, err)
	// Output: 7 2 <nil>
}
