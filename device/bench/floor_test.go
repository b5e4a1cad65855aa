package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// longPkt builds a QUIC v1 long-header packet of type bits typ (0 Initial,
// 1 0-RTT, 2 Handshake) with a payload of n bytes.
func longPkt(typ byte, n int) []byte {
	b := []byte{0xc0 | typ<<4, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0}
	if typ == 0 {
		b = append(b, 0) // token length
	}
	b = append(b, 0x40|byte(n>>8), byte(n)) // 2-byte varint length
	return append(b, make([]byte, n)...)
}

func TestClassifyPackets(t *testing.T) {
	cat := func(ps ...[]byte) []byte {
		var b []byte
		for _, p := range ps {
			b = append(b, p...)
		}
		return b
	}
	short := append([]byte{0x40}, make([]byte, 30)...)
	for _, tc := range []struct {
		name string
		b    []byte
		want []PacketType
	}{
		{"Initial", longPkt(0, 100), []PacketType{PktInitial}},
		{"Initial + 0-RTT", cat(longPkt(0, 100), longPkt(1, 50)), []PacketType{PktInitial, Pkt0RTT}},
		{"Initial + Handshake + 1-RTT", cat(longPkt(0, 100), longPkt(2, 200), short), []PacketType{PktInitial, PktHandshake, Pkt1RTT}},
		{"1-RTT", short, []PacketType{Pkt1RTT}},
		{"Retry", []byte{0xf0, 0, 0, 0, 1, 0, 0}, []PacketType{PktRetry}},
		{"truncated length", longPkt(2, 100)[:50], []PacketType{PktUnknown}},
		{"other version", []byte{0xc0, 0x6b, 0x33, 0x43, 0xcf, 0, 0, 0}, []PacketType{PktUnknown}},
		{"short", []byte{0xc0, 0, 0}, []PacketType{PktUnknown}},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyPackets(tc.b); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ClassifyPackets = %v, want %v", got, tc.want)
			}
		})
	}
}

// nbiotInfo is the nbiot link as the link emulator models it.
var nbiotInfo = LinkInfo{Name: "nbiot", DelayMs: 300, RateKbps: 20, RateDownKbps: 25, OverheadBytes: 28}

func dg(dir Dir, size int, at float64, pkts ...PacketType) Datagram {
	return Datagram{Dir: dir, Size: size, AtMs: at, Packets: pkts}
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.01 }

func TestWarmFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  []Datagram
		link LinkInfo
		want float64
		ok   bool
	}{
		{
			// The figure: (1200+28)*8/20 + 300 + (1200+28)*8/25 + 300.
			name: "nbiot 0-RTT wake-up (README trace)",
			seq: []Datagram{
				dg(Up, 1200, 0.4, PktInitial, Pkt0RTT), dg(Up, 417, 0.8, Pkt0RTT),
				dg(Down, 1200, 1472.4, PktInitial, PktHandshake, Pkt1RTT), dg(Up, 1200, 1472.5, PktInitial, PktHandshake, Pkt1RTT),
				dg(Down, 35, 1472.5, Pkt1RTT), dg(Down, 71, 1488, Pkt1RTT), dg(Up, 30, 1488.1, Pkt1RTT),
			},
			link: nbiotInfo, want: 491.2 + 300 + 392.96 + 300, ok: true,
		},
		{
			name: "probes before the broker's answer do not count",
			seq:  []Datagram{dg(Up, 1200, 0, PktInitial), dg(Up, 1200, 200, PktInitial), dg(Down, 1200, 1500, PktInitial, PktHandshake)},
			link: nbiotInfo, want: 491.2 + 300 + 392.96 + 300, ok: true,
		},
		{
			name: "no rate: the delays only",
			seq:  []Datagram{dg(Up, 1200, 0, PktInitial), dg(Down, 1200, 50, PktInitial)},
			link: LinkInfo{DelayMs: 25}, want: 50, ok: true,
		},
		{
			name: "one rate for both directions, no overhead",
			seq:  []Datagram{dg(Up, 1000, 0, PktInitial), dg(Down, 500, 50, PktInitial)},
			link: LinkInfo{DelayMs: 10, RateKbps: 80}, want: 100 + 10 + 50 + 10, ok: true,
		},
		{name: "no answer", seq: []Datagram{dg(Up, 1200, 0, PktInitial)}, link: nbiotInfo},
		{name: "empty", link: nbiotInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := WarmFloor(tc.seq, tc.link)
			if ok != tc.ok || !near(f.Ms, tc.want) {
				t.Fatalf("WarmFloor = %.2f, %v; want %.2f, %v (%s)", f.Ms, ok, tc.want, tc.ok, f)
			}
		})
	}
}

func TestColdFloor(t *testing.T) {
	up := func(n int) float64 { return float64(n+28) * 8 / 20 }
	down := func(n int) float64 { return float64(n+28) * 8 / 25 }
	for _, tc := range []struct {
		name   string
		seq    []Datagram
		respAt float64
		want   float64
		ok     bool
	}{
		{
			name: "full handshake: flight of three, finish coalesced with the request",
			seq: []Datagram{
				dg(Up, 1200, 0, PktInitial),
				dg(Down, 1200, 900, PktInitial, PktHandshake), dg(Down, 1200, 1300, PktHandshake), dg(Down, 600, 1500, PktHandshake, Pkt1RTT),
				dg(Up, 1200, 1501, PktInitial, PktHandshake, Pkt1RTT), dg(Up, 400, 1502, Pkt1RTT),
				dg(Down, 40, 2700, Pkt1RTT), dg(Down, 71, 2710, Pkt1RTT), dg(Up, 30, 2711, Pkt1RTT),
				dg(Down, 1200, 2900, PktInitial), // a broker probe after the answer
			},
			respAt: 2710.5,
			want:   up(1200) + 300 + down(1200) + down(1200) + down(600) + 300 + up(1200) + up(400) + 300 + down(71) + 300,
			ok:     true,
		},
		{
			name: "the client's ACK of the Initial and its probe are not the finish",
			seq: []Datagram{
				dg(Up, 1200, 0, PktInitial), dg(Up, 1200, 200, PktInitial),
				dg(Down, 1200, 900, PktInitial, PktHandshake), dg(Up, 1200, 901, PktInitial),
				dg(Down, 900, 1200, PktHandshake),
				dg(Up, 1200, 1201, PktInitial, PktHandshake, Pkt1RTT),
				dg(Up, 74, 1401, PktHandshake), // a Handshake probe, not the request
				dg(Down, 71, 2400, Pkt1RTT),
			},
			respAt: 2400,
			want:   up(1200) + 300 + down(1200) + down(900) + 300 + up(1200) + 300 + down(71) + 300,
			ok:     true,
		},
		{
			name:   "no finish",
			seq:    []Datagram{dg(Up, 1200, 0, PktInitial), dg(Down, 1200, 900, PktInitial, PktHandshake)},
			respAt: 1000,
		},
		{
			name: "no answer before the acknowledgement",
			seq: []Datagram{dg(Up, 1200, 0, PktInitial), dg(Down, 1200, 900, PktInitial, PktHandshake),
				dg(Up, 1200, 901, PktHandshake, Pkt1RTT), dg(Down, 71, 2000, Pkt1RTT)},
			respAt: 1500,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := ColdFloor(tc.seq, tc.respAt, nbiotInfo)
			if ok != tc.ok || !near(f.Ms, tc.want) {
				t.Fatalf("ColdFloor = %.2f, %v; want %.2f, %v (%s)", f.Ms, ok, tc.want, tc.ok, f)
			}
		})
	}
}

// TestReconnectStudyJSON checks reconnect.json's floors at the top level
// and each variant's TTFDs and multiples beside its proto.
func TestReconnectStudyJSON(t *testing.T) {
	warmSeq := []Datagram{dg(Up, 1200, 0, PktInitial, Pkt0RTT), dg(Down, 1200, 1480, PktInitial, PktHandshake, Pkt1RTT)}
	coldSeq := []Datagram{
		dg(Up, 1200, 0, PktInitial), dg(Down, 1200, 900, PktInitial, PktHandshake), dg(Down, 800, 1200, PktHandshake),
		dg(Up, 1200, 1201, PktInitial, PktHandshake, Pkt1RTT), dg(Down, 71, 2400, Pkt1RTT),
	}
	run := func(cold float64, warm ...float64) []Wakeup {
		cf, _ := ColdFloor(coldSeq, 2400, nbiotInfo)
		wf, _ := WarmFloor(warmSeq, nbiotInfo)
		ws := []Wakeup{{TTFDMs: cold, Floor: &cf}}
		for _, w := range warm {
			ws = append(ws, Wakeup{TTFDMs: w, Floor: &wf})
		}
		return ws
	}
	st := &ReconnectStudy{Link: nbiotInfo, Variants: []ReconnectVariant{{Name: "a", Proto: ProtoH3}, {Name: "b", Proto: ProtoMQTT}},
		Runs: map[string][][]Wakeup{
			"a": {run(3000, 1500, 1600, 2300)},
			"b": {run(6000, 5000, 5000, 5000)},
		}}
	st.Summarize()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		FloorWarmMs *float64         `json:"floor_warm_ms"`
		FloorColdMs *float64         `json:"floor_cold_ms"`
		Variants    []map[string]any `json:"variants"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	wantWarm, wantCold := 1484.16, 491.2+300+392.96+264.96+300+491.2+300+31.68+300
	if got.FloorWarmMs == nil || !near(*got.FloorWarmMs, wantWarm) || got.FloorColdMs == nil || !near(*got.FloorColdMs, wantCold) {
		t.Fatalf("floors in %s; want warm %.2f, cold %.2f", b, wantWarm, wantCold)
	}
	if len(got.Variants) != 2 {
		t.Fatalf("variants: %s", b)
	}
	for _, tc := range []struct {
		i                                 int
		proto                             string
		cold, p50, p90, coldX, p50X, p90X float64
	}{
		{0, ProtoH3, 3000, 1600, Quantile([]float64{1500, 1600, 2300}, 0.9), math.Round(100*3000/wantCold) / 100, 1.08, math.Round(100*Quantile([]float64{1500, 1600, 2300}, 0.9)/wantWarm) / 100},
		{1, ProtoMQTT, 6000, 5000, 5000, math.Round(100*6000/wantCold) / 100, 3.37, 3.37},
	} {
		v := got.Variants[tc.i]
		if v["proto"] != tc.proto {
			t.Errorf("variant %d: proto %v", tc.i, v["proto"])
		}
		for k, want := range map[string]float64{"cold_ttfd_ms": tc.cold, "warm_ttfd_p50_ms": tc.p50, "warm_ttfd_p90_ms": tc.p90,
			"cold_x_floor": tc.coldX, "warm_p50_x_floor": tc.p50X, "warm_p90_x_floor": tc.p90X} {
			if f, ok := v[k].(float64); !ok || !near(f, want) {
				t.Errorf("variant %d: %s = %v, want %.2f", tc.i, k, v[k], want)
			}
		}
	}
	var md strings.Builder
	if err := st.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"warm 1484 ms", "1.08×", "× warm floor"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("reconnect.md lacks %q:\n%s", want, md.String())
		}
	}
}

// TestWriteFloors: quiot bench prints the floor and each configuration's
// TTFD as a multiple of the first-connection floor.
func TestWriteFloors(t *testing.T) {
	sum, samples, _ := synthetic(3, false)
	cold := Floor{Ms: 400, Legs: []Leg{{What: "client Initial", Dir: Up, Datagrams: 1, Bytes: 1200, SerializeMs: 100, DelayMs: 300}}}
	var buf strings.Builder
	if err := WriteFloors(&buf, []Floors{{Profile: "nbiot", ColdMs: 400, Cold: &cold}}, sum, samples); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	ix := newIndex(samples)
	for _, p := range comparisonPairs(sum) {
		if p.profile != "nbiot" || p.tuning != "lean" {
			continue
		}
		want := fmt.Sprintf("lean, MQTT/QUIC: TTFD %.0f ms = %.2f× the first-connection floor", Median(ix.values(p.mqtt, "ttfd_ms")), Median(ix.values(p.mqtt, "ttfd_ms"))/400)
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "floor on nbiot: first connection 400 ms = client Initial 1200 B") || !strings.Contains(out, "resumed not computed") || strings.Contains(out, "lan") {
		t.Errorf("floors:\n%s", out)
	}
}

// TestMeasureFloors: the calibration's floors come from the datagrams on
// the wire: on a resumed connection, both first datagrams carry an
// Initial and are padded to 1200 bytes (RFC 9000 §14.1, lean's
// initial_packet_size).
func TestMeasureFloors(t *testing.T) {
	link, err := NewImpairLink()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := MeasureFloors(ctx, link, "lan", nil, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.Cold == nil || f.Warm == nil || len(f.Cold.Legs) != 4 || len(f.Warm.Legs) != 2 {
		t.Fatalf("floors %+v", f)
	}
	for _, l := range f.Warm.Legs {
		if l.Bytes != 1200 || l.Datagrams != 1 {
			t.Errorf("warm leg %+v: want one 1200-byte datagram", l)
		}
	}
	if fl := f.Cold.Legs[1]; fl.Bytes < 1200 {
		t.Errorf("broker's first flight %+v: want at least its padded Initial", fl)
	}
}
