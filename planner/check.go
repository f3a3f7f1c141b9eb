package planner

import (
	"errors"
	"fmt"
	"math"

	"github.com/piccolo-serving/piccolo/api"
)

// Verify re-checks a plan against the config it was made from, using nothing but the
// plan's JSON fields and the config's DAGs and prices: every group's WCL recomputed
// from its batch, duration and stream rate is within its module's budget; the
// budgets and the WCLs of every DAG path fit the SLO; group rates add up to module
// rate plus dummy rate; a module's WCL is its groups' worst plus the longest
// burst its parents pass on; machines carry their rate within the plan's utilisation;
// cost = Σ machines × price at every level; a module's race is the config's
// (one the planner chose for race: auto) and its tail the config's. It returns
// every violation found.
//
// A module with a measured tail (api.Tail) is checked as tailForms plans it:
// where its tail makes more than TailMiss of its items late at its race k,
// every group gives the duration its WCL is computed with (TailMs): Factor ×
// its duration, its machines then carrying the rate at the slow throughput,
// or, where that tail leaves at most √TailMiss of the items late, 2 × Factor
// × its duration, at the mean; elsewhere the WCL is at the
// profiled duration and the machines carry the rate at the mean. The mean
// throughput is the profiled one over 1 + Share^k·(Factor − 1), and a raced
// group's machines carry it k to a batch.
//
// The WCL formulas are written out again here on purpose, so a planner bug in
// wcl.go cannot hide from its own check.
func Verify(cfg *api.Config, p *api.Plan) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	// wcl is group g's WCL at stream rate w (req/s), computed with batch
	// duration d (s) and throughput t (req/s a machine): g's own, or a
	// tail's (tailCheck).
	wcl := func(g api.GroupPlan, d, t, w float64, dummy bool) float64 {
		b := float64(g.Batch)
		switch p.LatencyModel {
		case "tc-theorem1":
			return d + b/w
		case "tc-exact":
			if dummy {
				// Dummies are a second stream: Theorem 1's bound holds, the
				// exact one does not (docs/planner.md).
				return d + b/w
			}
			if g.Batch <= 1 {
				return d
			}
			return d + (b-1)/w
		case "rr-2d":
			return 2 * d
		case "local":
			return d + b/t
		}
		return math.NaN()
	}
	if _, err := ModelByName(p.LatencyModel); err != nil {
		bad("plan: %v", err)
	}
	rel := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
	total := 0.0
	for _, sp := range p.Sessions {
		total += sp.Cost
		s, ok := cfg.Session(sp.Name)
		if !ok {
			bad("session %q: not in the config", sp.Name)
			continue
		}
		if sp.Error != "" {
			continue
		}
		util := p.Utilization(&sp)
		g, err := newGraph(s)
		if err != nil {
			bad("%v", err)
			continue
		}
		if len(sp.Modules) != len(s.Modules) {
			bad("session %q: plan has %d modules, config %d", s.Name, len(sp.Modules), len(s.Modules))
			continue
		}
		slo := s.SLO.Seconds()
		// The burst each module passes to its children, recomputed from the JSON.
		burst := make([]float64, len(s.Modules))
		for i, mp := range sp.Modules {
			burst[i] = Burst(mp)
		}
		budgets := make([]float64, len(s.Modules))
		wcls := make([]float64, len(s.Modules))
		cost := 0.0
		for i, mp := range sp.Modules {
			m := s.Modules[i]
			where := fmt.Sprintf("session %q module %q", s.Name, m.Name)
			if mp.Name != m.Name || !rel(mp.Rate, m.Rate) {
				bad("%s: plan has module %q at %.6g req/s, config %q at %.6g", where, mp.Name, mp.Rate, m.Name, m.Rate)
			}
			if mp.DummyRate < 0 {
				bad("%s: negative dummy rate %.6g", where, mp.DummyRate)
			}
			want := 0 // the plan's race: the config's above 1, else none
			if m.Race > 1 {
				want = int(m.Race)
			}
			switch {
			case m.Race == api.RaceAuto:
				if mp.Race < 0 || mp.Race == 1 || mp.Race > api.MaxRace {
					bad("%s: race %d, want 0 (none) or 2 to %d for race: auto", where, mp.Race, api.MaxRace)
				}
			case mp.Race != want:
				bad("%s: race %d, the config's %d", where, mp.Race, want)
			}
			if (mp.Tail == nil) != (m.Tail == nil) || mp.Tail != nil && *mp.Tail != *m.Tail {
				bad("%s: tail %v, the config's %v", where, mp.Tail, m.Tail)
			}
			racers := max(mp.Race, 1)
			plain, heldUp, mean := tailCheck(m.Tail, racers)
			// What each group's WCL and machines are checked with.
			type eff struct{ d, t float64 }
			effs := make([]eff, len(mp.Configs))
			for k, gp := range mp.Configs {
				gw := fmt.Sprintf("%s group %d (%s b%d c%d)", where, k, gp.Hardware, gp.Batch, gp.Concurrency)
				e := eff{gp.DurationMs / 1000, gp.Throughput / mean}
				switch {
				case gp.TailMs == 0 && !plain:
					bad("%s: its tail {share: %g, factor: %g} makes more than %g of its items late at race %d: want tail_ms, the duration its WCL is computed with", gw, m.Tail.Share, m.Tail.Factor, TailMiss, racers)
				case gp.TailMs == 0:
				case plain:
					bad("%s: tail_ms %.6g, but the module's tail is within %g of its items at race %d: want none", gw, gp.TailMs, TailMiss, racers)
				case rel(gp.TailMs, m.Tail.Factor*gp.DurationMs): // headroom: sized for every batch slow
					e = eff{gp.TailMs / 1000, gp.Throughput / m.Tail.Factor}
				case heldUp && rel(gp.TailMs, 2*m.Tail.Factor*gp.DurationMs): // held up behind a slow batch: sized at the mean
					e.d = gp.TailMs / 1000
				default:
					bad("%s: tail_ms %.6g: want factor × duration %.6g (headroom), or twice that (held up) where the tail leaves at most %.3g of the items late", gw, gp.TailMs, m.Tail.Factor*gp.DurationMs, math.Sqrt(TailMiss))
				}
				effs[k] = e
			}
			budgets[i], wcls[i] = mp.BudgetMs/1000, mp.WCLMs/1000
			rate, mcost, maxWCL := 0.0, 0.0, 0.0
			w := 0.0
			for k := len(mp.Configs) - 1; k >= 0; k-- {
				gp := mp.Configs[k]
				gw := fmt.Sprintf("%s group %d (%s b%d c%d)", where, k, gp.Hardware, gp.Batch, gp.Concurrency)
				w += gp.Rate
				rate += gp.Rate
				mcost += gp.Cost
				hw, ok := cfg.HardwareByName(gp.Hardware)
				if !ok || !rel(hw.Price, gp.Price) {
					bad("%s: price %.6g does not match the catalog", gw, gp.Price)
				}
				if t := float64(gp.Batch*gp.Concurrency) / (gp.DurationMs / 1000); !rel(t, gp.Throughput) {
					bad("%s: throughput %.6g, but c·b/d = %.6g", gw, gp.Throughput, t)
				}
				if carry := gp.Machines / float64(racers) * effs[k].t * util; gp.Rate > carry*(1+1e-9)+1e-9 {
					bad("%s: %.6g machines (each batch on %d, at %.6g req/s a machine) at utilisation %.2f carry %.6g req/s, less than its rate %.6g",
						gw, gp.Machines, racers, effs[k].t, util, carry, gp.Rate)
				}
				if !rel(gp.Cost, gp.Machines*gp.Price) {
					bad("%s: cost %.6g ≠ machines × price %.6g", gw, gp.Cost, gp.Machines*gp.Price)
				}
				l := wcl(gp, effs[k].d, effs[k].t, w, mp.DummyRate > 0)
				if !rel(l*1000, gp.WCLMs) {
					bad("%s: WCL %.6gms, recomputed %.6gms", gw, gp.WCLMs, l*1000)
				}
				if l > budgets[i]+1e-9 {
					bad("%s: WCL %.6gms exceeds the module budget %.6gms", gw, l*1000, mp.BudgetMs)
				}
				maxWCL = math.Max(maxWCL, l)
				if k > 0 {
					prev := mp.Configs[k-1]
					if effs[k-1].t/prev.Price < effs[k].t/gp.Price*(1-1e-9) {
						bad("%s: listed after a group of lower throughput-cost ratio", gw)
					}
				}
			}
			if !rel(rate, mp.Rate+mp.DummyRate) {
				bad("%s: group rates add up to %.6g, want rate + dummy = %.6g", where, rate, mp.Rate+mp.DummyRate)
			}
			if !rel(mcost, mp.Cost) {
				bad("%s: cost %.6g ≠ Σ group costs %.6g", where, mp.Cost, mcost)
			}
			beta := g.parentBurst(i, func(p int) float64 { return burst[p] })
			if !rel((maxWCL+beta)*1000, mp.WCLMs) {
				bad("%s: WCL %.6gms ≠ max over groups %.6gms + parents' burst %.6gms", where, mp.WCLMs, maxWCL*1000, beta*1000)
			}
			if mp.WCLMs > mp.BudgetMs*(1+1e-6)+1e-6 {
				bad("%s: WCL %.6gms exceeds its budget %.6gms", where, mp.WCLMs, mp.BudgetMs)
			}
			cost += mp.Cost
		}
		if lb, _ := g.longest(budgets); lb > slo+1e-9 {
			bad("session %q: budgets on path %v add up to %s, above the SLO %s", s.Name, g.criticalPath(budgets), fmtSeconds(lb), fmtSeconds(slo))
		}
		if lw, _ := g.longest(wcls); !rel(lw*1000, sp.LatencyMs) || lw > slo+1e-9 {
			bad("session %q: latency %.6gms, longest WCL path %.6gms, SLO %.6gms", s.Name, sp.LatencyMs, lw*1000, slo*1000)
		}
		if !rel(cost, sp.Cost) {
			bad("session %q: cost %.6g ≠ Σ module costs %.6g", s.Name, sp.Cost, cost)
		}
	}
	if !rel(total, p.TotalCost) {
		bad("plan: total cost %.6g ≠ Σ session costs %.6g", p.TotalCost, total)
	}
	return errors.Join(errs...)
}

// Burst returns the burst (s) module mp passes to its children, from its
// groups in a plan: the longest gap between two batch completions, b_max / W
// + d_max − d_min (W the groups' summed rate, req/s; b_max the largest batch;
// d the batch durations), as the planner computes it for a config (burstOf).
// A child's WCL is its groups' largest plus its parents' largest burst;
// Check holds a plan to it. 0 for a module with no rate. For a module planned
// for its tail, d_max is the longest TailMs (the slow batch a child may wait
// for).
func Burst(mp api.ModulePlan) float64 {
	W, bMax, dMin, dMax := 0.0, 0, math.Inf(1), 0.0
	for _, gp := range mp.Configs {
		W += gp.Rate
		bMax = max(bMax, gp.Batch)
		dMin, dMax = math.Min(dMin, gp.DurationMs/1000), math.Max(dMax, max(gp.DurationMs, gp.TailMs)/1000)
	}
	return burst(W, bMax, dMin, dMax)
}

// tailCheck is tailForms written out again for Verify: with q =
// Share^k·(1 + Factor) the share of a module's items tail t at race k makes
// late, whether q ≤ TailMiss, whether q ≤ √TailMiss, and the mean batch
// duration over the profiled one, 1 + Share^k·(Factor − 1).
func tailCheck(t *api.Tail, k int) (plain, heldUp bool, mean float64) {
	if t == nil || !(t.Share > 0) || !(t.Factor > 1) {
		return true, false, 1
	}
	p := math.Pow(t.Share, float64(k))
	q := p * (1 + t.Factor)
	return q <= TailMiss*(1+1e-9), q <= math.Sqrt(TailMiss)*(1+1e-9), 1 + p*(t.Factor-1)
}
