package planner

import (
	"math"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// linkConfig is a chain whose first model emits 1 MiB an item, on hardware
// whose link to the gateway is 1 ms and 100 Mbit/s each way (LINK is
// replaced by the link fields, or nothing).
const linkConfig = `
hardware:
  - {name: cpu, price: 1LINK}
profiles:
  - model: mk
    hardware: cpu
    input_bytes: 4
    output_bytes: 1048576
    entries: [{batch: 1, concurrency: 1, duration: 5ms}]
  - model: use
    hardware: cpu
    input_bytes: 1048576
    output_bytes: 4
    entries: [{batch: 1, concurrency: 1, duration: 5ms}]
sessions:
  - name: chain
    slo: SLO
    modules:
      - {name: make, model: mk, rate: 4}
      - {name: read, model: use, rate: 4, after: [make]}
`

// TestLinkTransferInThePlan: with a link on the hardware and the items'
// bytes on the profiles, each batch's duration is its compute plus its
// transfer (2 × 1 ms and 1 MiB + 4 B at 100 Mbit/s: 85.9 ms): the chain,
// whose fastest latency at 4 req/s is 260 ms on compute alone, is refused
// at a 300 ms SLO with the link (432 ms) and planned at 600 ms; without the
// link it plans at 300 ms.
func TestLinkTransferInThePlan(t *testing.T) {
	load := func(link, slo string) *api.Config {
		t.Helper()
		text := strings.NewReplacer("LINK", link, "SLO", slo).Replace(linkConfig)
		cfg, err := api.LoadBytes(api.NamedDoc{Name: "link.yaml", Data: []byte(text)})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const link = ", link_latency: 1ms, link_mbps: 100"
	want := 5 + 2 + (1048576+4)*8/100e6*1000 // ms
	p, err := Plan(load(link, "600ms"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Sessions[0]
	if sp.Error != "" {
		t.Fatalf("600 ms with the link: %s", sp.Error)
	}
	for _, m := range sp.Modules {
		if d := m.Configs[0].DurationMs; math.Abs(d-want) > 0.01 {
			t.Errorf("%s: duration %.3f ms; want compute and transfer, %.3f ms", m.Name, d, want)
		}
	}
	t.Logf("with the link: durations %.1f ms, latency %.1f ms, cost %.3f", want, sp.LatencyMs, sp.Cost)
	if _, err = Plan(load(link, "300ms"), Options{}); err == nil || !strings.Contains(err.Error(), "infeasible") {
		t.Errorf("300 ms with the link: %v; want it refused as infeasible, the transfers alone take %.0f ms", err, 2*(want-5))
	}
	p, err = Plan(load("", "300ms"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sp := p.Sessions[0]; sp.Error != "" || sp.Modules[0].Configs[0].DurationMs != 5 {
		t.Errorf("300 ms without the link: error %q, duration %v; want planned at the profile's 5 ms", sp.Error, sp.Modules[0].Configs[0].DurationMs)
	}
}
