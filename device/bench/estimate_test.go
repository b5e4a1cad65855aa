package bench

import (
	"testing"
	"time"
)

func TestEstimate(t *testing.T) {
	link, err := NewImpairLink()
	if err != nil {
		t.Fatal(err)
	}
	infos := map[string]LinkInfo{}
	for _, p := range []string{"lan", "wifi", "ltem", "nbiot", "lossy", "sat"} {
		infos[p], _ = link.Info(p)
	}
	spec := Spec{Protos: []string{ProtoH3, ProtoMQTT}, Modes: []string{"request", "stream"}, Profiles: []string{"lan", "wifi", "ltem", "nbiot", "lossy", "sat"},
		Payloads: []int{256}, Tunings: []Tuning{{Name: "default"}, {Name: "lean"}}, Repeat: 5, Count: 50, Rate: 5}
	d := EstimateDuration(spec, infos)
	t.Logf("study preset: %d runs, about %v", len(spec.Expand()), d.Round(time.Second))
	if lan, nb := EstimateRun(spec, infos["lan"]), EstimateRun(spec, infos["nbiot"]); lan < 10*time.Second || nb <= lan {
		t.Fatalf("per run: lan %v, nbiot %v", lan, nb)
	}
}
