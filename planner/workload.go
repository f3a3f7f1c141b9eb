package planner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// WorkloadSpec bounds the random workloads of the planner benchmark (§IV's
// evaluation, reproduced on synthetic profiles).
type WorkloadSpec struct {
	MinModules, MaxModules int     // modules per session (1–5)
	MinRate, MaxRate       float64 // req/s, drawn log-uniformly (10–2000)
	MaxBatch               int     // batch sizes 1, 2, 4, … up to this (64)
	MaxConcurrency         int     // concurrency 1 … this (4)
	MinHardware            int     // hardware types per workload (2–3)
	MaxHardware            int
}

// DefaultWorkloadSpec is the benchmark: 1–5 modules, chains and DAGs with
// parallel branches, 2–3 hardware types, batch 1–64, concurrency 1–4, rates
// 10–2000 req/s, SLOs from tight to loose.
var DefaultWorkloadSpec = WorkloadSpec{MinModules: 1, MaxModules: 5, MinRate: 10, MaxRate: 2000, MaxBatch: 64, MaxConcurrency: 4, MinHardware: 2, MaxHardware: 3}

// GenerateWorkloads returns n single-session configs drawn from spec with the given
// seed; the same seed gives the same workloads.
//
// Profile shape: a batch of b takes d1·(o + (1−o)·b) on one instance, with a
// fixed-overhead share o in [0.2, 0.9], so throughput grows sub-linearly with b and
// then flattens as duration turns linear; c instances on one device each run
// (1 + β(c−1)) slower, β in [0.35, 0.9]. Hardware type h is s_h times faster at
// price p_h, with a per-model speed-up spread of ±30%. The SLO is the fastest
// possible latency (batch 1, under the slower of 2d and d + 1/T) times a factor
// drawn log-uniformly in [1.2, 12].
func GenerateWorkloads(seed uint64, n int, spec WorkloadSpec) []*api.Config {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]*api.Config, 0, n)
	for len(out) < n {
		out = append(out, generateWorkload(r, len(out), spec))
	}
	return out
}

func generateWorkload(r *rand.Rand, id int, spec WorkloadSpec) *api.Config {
	logUniform := func(lo, hi float64) float64 { return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo))) }
	uniform := func(lo, hi float64) float64 { return lo + r.Float64()*(hi-lo) }
	between := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }

	cfg := &api.Config{}
	nh := between(spec.MinHardware, spec.MaxHardware)
	type hw struct{ speed, price float64 }
	// Faster hardware costs more, but not in proportion: which type is the most
	// cost-efficient depends on the model.
	kinds := []hw{{1, 1}, {uniform(2, 3.5), uniform(1.8, 3.2)}, {uniform(4, 7), uniform(3.5, 6.5)}}
	for h := 0; h < nh; h++ {
		cfg.Hardware = append(cfg.Hardware, api.Hardware{Name: fmt.Sprintf("hw%d", h), Price: math.Round(kinds[h].price*100) / 100})
	}
	nm := between(spec.MinModules, spec.MaxModules)
	s := api.Session{Name: fmt.Sprintf("w%d", id)}
	minD := make([]float64, nm)
	for m := 0; m < nm; m++ {
		model := fmt.Sprintf("w%d-m%d", id, m)
		d1 := logUniform(0.002, 0.05) // batch-1 duration on hw0, seconds
		overhead := uniform(0.2, 0.9)
		beta := uniform(0.35, 0.9)
		minD[m] = math.Inf(1)
		for h := 0; h < nh; h++ {
			speed := kinds[h].speed * uniform(0.7, 1.3)
			if h == 0 {
				speed = 1
			}
			p := api.Profile{Model: model, Hardware: cfg.Hardware[h].Name}
			for b := 1; b <= spec.MaxBatch; b *= 2 {
				for c := 1; c <= spec.MaxConcurrency; c++ {
					d := d1 * (overhead + (1-overhead)*float64(b)) * (1 + beta*float64(c-1)) / speed
					d *= uniform(0.97, 1.03)
					d = math.Round(d*1e6) / 1e6 // whole microseconds, as a profiler writes them
					p.Entries = append(p.Entries, api.ProfileEntry{Batch: b, Concurrency: c, Duration: api.Duration(time.Duration(d * 1e9))})
					minD[m] = math.Min(minD[m], d)
				}
			}
			cfg.Profiles = append(cfg.Profiles, p)
		}
		mod := api.Module{Name: fmt.Sprintf("m%d", m), Model: model}
		if m == 0 {
			mod.Rate = logUniform(spec.MinRate, spec.MaxRate)
		} else {
			// A chain half of the time; otherwise one or two earlier parents, so
			// parallel branches and joins appear.
			parents := []int{m - 1}
			if r.IntN(2) == 0 {
				parents = []int{r.IntN(m)}
				if m >= 2 && r.IntN(2) == 0 {
					if q := r.IntN(m); q != parents[0] {
						parents = append(parents, q)
					}
				}
			}
			for _, p := range parents {
				mod.After = append(mod.After, fmt.Sprintf("m%d", p))
			}
			mod.Rate = math.Min(spec.MaxRate, math.Max(spec.MinRate, s.Modules[parents[0]].Rate*uniform(0.5, 1.5)))
		}
		mod.Rate = math.Round(mod.Rate*10) / 10
		s.Modules = append(s.Modules, mod)
	}
	// The SLO scales the fastest latency under the most conservative model the
	// policies use: batch 1 under 2d (round-robin) or d + 1/T (Theorem 1), so
	// that a tight SLO is tight for every policy, not infeasible for some by
	// construction.
	g, _ := newGraph(&s)
	for m := range minD {
		minD[m] = math.Max(2*minD[m], minD[m]+1/s.Modules[m].Rate)
	}
	fast, _ := g.longest(minD)
	s.SLO = api.Duration(time.Duration(fast * logUniform(1.2, 12) * 1e9).Round(time.Millisecond))
	if s.SLO.Seconds() <= fast {
		s.SLO += api.Duration(time.Millisecond)
	}
	cfg.Sessions = []api.Session{s}
	return cfg
}
