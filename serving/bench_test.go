package serving

import (
	"fmt"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/simulate"
)

// fastConfig is issue 32's case: an echo model on hardware "fast" (100 µs
// for batch 1, 250 µs for batch 64), one session of modules m1 → … → mk at
// rate req/s, SLO 50 ms for one module and 250 ms for more (at 50 req/s a
// chain of five cannot wait for batches within 50 ms), one backend listed.
func fastConfig(tb testing.TB, modules int, rate float64) *api.Config {
	tb.Helper()
	var b strings.Builder
	slo := "50ms"
	if modules > 1 {
		slo = "250ms"
	}
	b.WriteString(`hardware:
  - {name: fast, price: 1}
profiles:
  - model: echo
    hardware: fast
    entries:
      - {batch: 1, concurrency: 1, duration: 100us}
      - {batch: 8, concurrency: 1, duration: 130us}
      - {batch: 16, concurrency: 1, duration: 160us}
      - {batch: 32, concurrency: 1, duration: 200us}
      - {batch: 64, concurrency: 1, duration: 250us}
sessions:
  - name: fast
    slo: ` + slo + `
    modules:
`)
	for i := 1; i <= modules; i++ {
		after := ""
		if i > 1 {
			after = fmt.Sprintf(", after: [m%d]", i-1)
		}
		fmt.Fprintf(&b, "      - {name: m%d, model: echo, rate: %g%s}\n", i, rate, after)
	}
	b.WriteString("backends:\n  - {id: fast-0, address: \"127.0.0.1:1\", hardware: fast}\n")
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "fast.yaml", Data: []byte(b.String())})
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// BenchmarkPlanForServing: the serving plan of one session of one and of
// five modules at 50 and at 150,000 req/s on one backend (issue 32,
// "Planning time independent of the rate"): the burst check simulates at
// most simulate.BurstItems items, so the rates take about as long.
func BenchmarkPlanForServing(b *testing.B) {
	for _, c := range []struct {
		modules int
		rate    float64
	}{{1, 50}, {1, 150000}, {5, 50}, {5, 150000}} {
		b.Run(fmt.Sprintf("modules=%d/rate=%g", c.modules, c.rate), func(b *testing.B) {
			cfg := fastConfig(b, c.modules, c.rate)
			for b.Loop() {
				if p, err := Plan(cfg, Options{}); p == nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBurstCheckItemsBounded: the burst check's simulation is bounded by
// items, not by seconds of arrivals (issue 32, Build 5): at 50 req/s the
// five-module session simulates 60 s of arrivals, at 150,000 req/s as many
// items as simulate.BurstItems allows (Poisson arrivals: within 10%), not
// 3,000× more. The simulated count, not the wall time, is asserted.
func TestBurstCheckItemsBounded(t *testing.T) {
	for _, c := range []struct {
		rate      float64
		wantItems float64 // expected: min(60 s × 5 × rate, BurstItems)
	}{
		{50, 60 * 5 * 50},
		{150000, simulate.BurstItems},
	} {
		cfg := fastConfig(t, 5, c.rate)
		cfg.Backends = nil // no pool: the check alone
		p, rep, err := simulate.PlanForBursts(cfg, planner.Options{}, DefaultHeadroom.Check(DefaultBurstTarget))
		if p == nil || rep == nil {
			t.Fatalf("%g req/s: no plan or report: %v", c.rate, err)
		}
		items := 0
		for _, s := range rep.Sessions {
			items += s.Requests * 5
		}
		if f := float64(items); f > 1.1*c.wantItems || f < 0.9*c.wantItems {
			t.Errorf("%g req/s: the burst check simulated %d items; want %.0f ± 10%%", c.rate, items, c.wantItems)
		}
	}
}
