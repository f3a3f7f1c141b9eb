package planner

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// GenerateVariantWorkloads returns the planner benchmark's workloads
// (GenerateWorkloads with the same seed and spec) with model variants: every
// module keeps its model as its most accurate variant (accuracy drawn in
// [0.95, 0.995]) and gains 1–3 cheaper ones, copies of its profiles with every
// duration scaled by s in [0.25, 0.85] and accuracy lowered by k·(1−s) of it,
// k in [0.03, 0.25] (a smaller model loses more). The session's accuracy
// target is the most accurate combination's times a factor in [0.75, 1].
func GenerateVariantWorkloads(seed uint64, n int, spec WorkloadSpec) []*api.Config {
	ws := GenerateWorkloads(seed, n, spec)
	r := rand.New(rand.NewPCG(seed, 0x5eed0f0a))
	uniform := func(lo, hi float64) float64 { return lo + r.Float64()*(hi-lo) }
	for _, cfg := range ws {
		s := &cfg.Sessions[0]
		best := 1.0
		for i := range s.Modules {
			m := &s.Modules[i]
			top := math.Round(uniform(0.95, 0.995)*1000) / 1000
			m.Variants = []api.Variant{{Model: m.Model, Accuracy: top}}
			k := uniform(0.03, 0.25)
			for v := 1 + r.IntN(3); v > 0; v-- {
				scale := uniform(0.25, 0.85)
				name := fmt.Sprintf("%s-v%d", m.Model, len(m.Variants))
				for _, p := range cfg.ProfilesOf(m.Model) {
					q := api.Profile{Model: name, Hardware: p.Hardware}
					for _, e := range p.Entries {
						e.Duration = api.Duration(time.Duration(float64(e.Duration) * scale).Round(time.Microsecond))
						q.Entries = append(q.Entries, e)
					}
					cfg.Profiles = append(cfg.Profiles, q)
				}
				acc := math.Round(top*(1-k*(1-scale))*1000) / 1000
				m.Variants = append(m.Variants, api.Variant{Model: name, Accuracy: acc})
			}
			m.Model = ""
			best *= top
		}
		target := math.Floor(best*uniform(0.75, 1)*1000) / 1000
		s.Accuracy = &target
	}
	return ws
}

// VariantBenchRow compares one way of choosing variants with another over the
// workloads both planned: average and largest extra cost, and on how many.
type VariantBenchRow struct {
	Name, Against string
	Planned, N    int
	Avg, Max      float64 // extra cost, (cost − against)/against
	Runtime       time.Duration
}

// RunVariantBench plans every workload five ways, each plan passing Check:
// policy piccolo with JellyBean's beam, with the default climb, and with every
// combination; the exhaustive optimum (policy optimal: every combination and
// the exact configs and split); and always the most accurate variants
// (MostAccurate). Headroom is off, as in the planner benchmark. Rows: beam,
// climb and every combination against the optimum; climb against every
// combination; beam and climb against the most accurate; the optimum itself
// (for its runtime).
func RunVariantBench(ws []*api.Config) ([]VariantBenchRow, error) {
	type way struct {
		name string
		o    Options
		mod  func(*api.Config) *api.Config
	}
	same := func(c *api.Config) *api.Config { return c }
	ways := []way{
		{"beam", Options{Policy: "piccolo", MaxUtilization: 1, VariantSearch: "beam"}, same},
		{"climb", Options{Policy: "piccolo", MaxUtilization: 1}, same},
		{"all combinations", Options{Policy: "piccolo", MaxUtilization: 1, VariantSearch: "all"}, same},
		{"optimal", Options{Policy: "optimal", MaxUtilization: 1}, same},
		{"most accurate", Options{Policy: "piccolo", MaxUtilization: 1}, MostAccurate},
	}
	costs := make([][]float64, len(ways))
	runtimes := make([][]time.Duration, len(ways))
	for i, w := range ways {
		for n, cfg := range ws {
			c := w.mod(cfg)
			start := time.Now()
			p, err := Plan(c, w.o)
			runtimes[i] = append(runtimes[i], time.Since(start))
			switch {
			case err == nil:
				if cerr := Verify(c, p); cerr != nil {
					return nil, fmt.Errorf("workload %d, %s: plan fails its check: %w", n, w.name, cerr)
				}
				costs[i] = append(costs[i], p.TotalCost)
			case errors.Is(err, ErrInfeasible):
				costs[i] = append(costs[i], math.NaN())
			default:
				return nil, fmt.Errorf("workload %d, %s: %w", n, w.name, err)
			}
		}
	}
	row := func(a, b int) VariantBenchRow {
		r := VariantBenchRow{Name: ways[a].name, Against: ways[b].name, Max: math.Inf(-1)}
		sum := 0.0
		for n := range ws {
			if !math.IsNaN(costs[a][n]) {
				r.Planned++
			}
			if math.IsNaN(costs[a][n]) || math.IsNaN(costs[b][n]) || costs[b][n] <= 0 {
				continue
			}
			x := (costs[a][n] - costs[b][n]) / costs[b][n]
			sum += x
			r.Max = math.Max(r.Max, x)
			r.N++
		}
		if r.N > 0 {
			r.Avg = sum / float64(r.N)
		}
		rt := slices.Clone(runtimes[a])
		slices.Sort(rt)
		r.Runtime = rt[len(rt)/2]
		return r
	}
	return []VariantBenchRow{row(0, 3), row(1, 3), row(2, 3), row(1, 2), row(0, 4), row(1, 4), row(3, 3)}, nil
}

// VariantBenchLines formats rows, one line each.
func VariantBenchLines(rows []VariantBenchRow, workloads int) string {
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-16s vs %-16s planned %d/%d, compared on %d: avg %+.2f%%, max %+.2f%%, runtime p50 %s\n",
			r.Name, r.Against, r.Planned, workloads, r.N, 100*r.Avg, 100*r.Max, fmtDur(r.Runtime))
	}
	return b.String()
}
