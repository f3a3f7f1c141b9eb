package serving

import (
	"fmt"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// fastConfig is issue 32's case: an echo model on hardware "fast" (100 µs
// for batch 1, 250 µs for batch 64), one session of modules m1 → … → mk at
// rate req/s, SLO 50 ms, one backend listed.
func fastConfig(tb testing.TB, modules int, rate float64) *api.Config {
	tb.Helper()
	var b strings.Builder
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
    slo: 50ms
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

// BenchmarkPlanForServing: the serving plan of one session of five modules
// at 50 and at 150,000 req/s (issue 32, "Planning time independent of the
// rate"): the burst check simulates at most simulate.BurstItems items, so
// the two take about as long.
func BenchmarkPlanForServing(b *testing.B) {
	for _, rate := range []float64{50, 150000} {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			cfg := fastConfig(b, 5, rate)
			for b.Loop() {
				if p, err := Plan(cfg, Options{}); p == nil {
					b.Fatal(err)
				}
			}
		})
	}
}
