package planner

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// runs counts Plan's calls since the process started (Runs).
var runs atomic.Int64

// Runs returns how many times Plan has run in this process, from any
// goroutine: the planner's own count, so a caller measures the planner runs
// one config change, membership change or re-plan costs as the difference
// of two readings (docs/planner.md, "Planner runs per change"). One atomic
// add per Plan call.
func Runs() int64 { return runs.Load() }

// Plan plans every session of cfg with the policy and options in o and returns the
// plan (api.Plan: per session, per module, per config group). A session that
// cannot meet its SLO gets an error naming it, the fastest latency it could reach
// and its SLO (wrapping ErrInfeasible); the other sessions are still planned, and the returned error
// joins the sessions' errors. Invalid options return a nil plan and an error.
func Plan(cfg *api.Config, o Options) (*api.Plan, error) {
	runs.Add(1)
	pol, err := resolve(o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out := &api.Plan{Policy: pol.name, LatencyModel: pol.model.Name(), MaxUtilization: pol.gen.util}
	var errs []error
	for name, u := range o.SessionUtilization {
		if !(u > 0 && u <= 1) {
			return nil, fmt.Errorf("session %q: max utilization %v: must be in (0, 1] (1 = no headroom)", name, u)
		}
	}
	for i := range cfg.Sessions {
		spol := pol
		u, own := o.SessionUtilization[cfg.Sessions[i].Name]
		own = own && u != pol.gen.util
		if own {
			spol.gen.util = u
		}
		sp, err := planVariants(cfg, &cfg.Sessions[i], spol)
		if own && err == nil {
			sp.MaxUtilization = u
		}
		if err != nil {
			errs = append(errs, err)
			sp = api.SessionPlan{Name: cfg.Sessions[i].Name, SLOMs: ms(cfg.Sessions[i].SLO.Seconds()), Error: err.Error()}
		}
		out.TotalCost += sp.Cost
		out.Sessions = append(out.Sessions, sp)
		if pol.pool != nil {
			pol.pool = lessPool(pol.pool, &sp)
		}
	}
	out.RuntimeMs = float64(time.Since(start).Microseconds()) / 1000
	return out, errors.Join(errs...)
}

// planSession plans session s under pol; its modules with race: auto are
// raced or not as chooseRaces decides.
func planSession(cfg *api.Config, s *api.Session, pol policy) (api.SessionPlan, error) {
	if hasAutoRace(s) {
		return chooseRaces(s, func(s *api.Session) (api.SessionPlan, error) { return planRaces(cfg, s, pol) })
	}
	return planRaces(cfg, s, pol)
}

// planRaces plans session s under pol, each module raced as its Race says.
func planRaces(cfg *api.Config, s *api.Session, pol policy) (api.SessionPlan, error) {
	if pol.singleHW && pol.filter.hardware == "" {
		return planSingleHardware(cfg, s, pol)
	}
	g, mods, err := sessionInputs(cfg, s, pol.filter)
	if err != nil {
		return api.SessionPlan{}, err
	}
	slo := s.SLO.Seconds()
	if w, total := fastest(g, mods, pol.model, pol.gen.util); total > slo+latencyEps && !(pol.dummy && pol.model.RateDependent()) {
		return api.SessionPlan{}, infeasibleError(s.Name, g, w, total, slo)
	}
	// The split and the config generator see each module's own WCL; the bursts a
	// module's children receive (burstOf) are only known once the parents' configs
	// are. So plan, measure the longest path with the bursts, and if it is over
	// the SLO plan again with that much less latency to split (at most a few
	// rounds; the search policies place bursts exactly and need one).
	var results []moduleResult
	reserve := 0.0
	for round := 0; ; round++ {
		results, err = planModules(g, mods, slo, slo-reserve, pol)
		if err != nil && round > 0 {
			// Splitting less latency failed: fall back to the fastest plan.
			if r, ok := fastestPlan(g, mods, slo, pol); ok {
				results, err = r, nil
				break
			}
		}
		if err != nil {
			if w, total := fastest(g, mods, pol.model, pol.gen.util); total > slo+latencyEps {
				return api.SessionPlan{}, infeasibleError(s.Name, g, w, total, slo)
			}
			return api.SessionPlan{}, fmt.Errorf("session %q: %w", s.Name, err)
		}
		over := pathLength(g, results) - slo
		if over <= latencyEps {
			break
		}
		if round == 4 || slo-reserve-over <= 0 {
			// Last resort: every module at its fastest config, then the slack
			// given out by reassignment, which sees the bursts.
			if r, ok := fastestPlan(g, mods, slo, pol); ok {
				results = r
				break
			}
			if w, total := fastest(g, mods, pol.model, pol.gen.util); total > slo+latencyEps {
				return api.SessionPlan{}, infeasibleError(s.Name, g, w, total, slo)
			}
			return api.SessionPlan{}, fmt.Errorf("session %q: %w: with the bursts its modules pass to their children the plan needs %s, above its SLO %s",
				s.Name, ErrInfeasible, fmtSeconds(over+slo), fmtSeconds(slo))
		}
		reserve += over
	}
	if pol.pool != nil {
		results = fitToPool(g, mods, results, slo, pol)
	}
	return sessionPlan(s, g, mods, results, slo, pol.model), nil
}

// sessionInputs returns s's DAG and what the planner knows of each module:
// its candidates, as its measured tail (if any) and race make them
// (withTail).
func sessionInputs(cfg *api.Config, s *api.Session, f filter) (*graph, []moduleInput, error) {
	g, err := newGraph(s)
	if err != nil {
		return nil, nil, err
	}
	mods := make([]moduleInput, len(s.Modules))
	for i, m := range s.Modules {
		cands, err := candidates(cfg, m.Model, f)
		if err != nil {
			return nil, nil, fmt.Errorf("session %q module %q: %w", s.Name, m.Name, err)
		}
		mods[i] = moduleInput{name: m.Name, rate: m.Rate, cands: withTail(cands, m.Tail, m.Racers())}
	}
	return g, mods, nil
}

// planModules plans every module within an SLO of split seconds for the split and
// slo seconds for reassignment.
func planModules(g *graph, mods []moduleInput, slo, split float64, pol policy) ([]moduleResult, error) {
	if mp, ok := pol.split.(modulePlanner); ok { // quantized, the optimum's search
		return mp.planModules(g, mods, slo, pol)
	}
	budgets, allow := splitLatency(g, mods, split, pol.model, pol.gen.util, pol.split)
	results := make([]moduleResult, len(mods))
	for i, m := range mods {
		gp := pol.gen
		gp.maxBurst = allow[i]
		r, ok := planModule(m.cands, m.rate, budgets[i], gp, pol.dummy)
		if !ok {
			return nil, fmt.Errorf("module %q: %w: no config set serves %.4g req/s within its budget %s (policy %s, latency model %s)",
				m.name, ErrInfeasible, m.rate, fmtSeconds(budgets[i]), pol.name, pol.model.Name())
		}
		results[i] = r
	}
	reassign(g, mods, results, slo, pol)
	return results, nil
}

// fastestPlan runs every module on the single config that adds least latency to a
// path (Algorithm 2's default DAG, counting bursts), then reassigns the remaining latency; it reports false when even
// that, with the bursts, does not fit the SLO.
func fastestPlan(g *graph, mods []moduleInput, slo float64, pol policy) ([]moduleResult, bool) {
	results := make([]moduleResult, len(mods))
	for i, m := range mods {
		if m.rate <= rateEps {
			continue
		}
		// The config of least latency on a path: its WCL, plus the burst it
		// passes on where it has children.
		best := math.Inf(1)
		for _, c := range m.cands {
			r := finish([]group{{c: c, machines: m.rate / (pol.gen.util * c.Throughput), rate: m.rate}}, 0, pol.model)
			l := r.wcl
			if len(g.children[i]) > 0 {
				l += r.burst
			}
			if l < best {
				best, results[i] = l, r
			}
		}
	}
	if pathLength(g, results) > slo+latencyEps {
		return nil, false
	}
	if !pol.optimal {
		reassign(g, mods, results, slo, pol)
	}
	return results, true
}

// betas returns, for each module, the burst its parents pass it: the longest gap
// between two batch completions of any parent (burstOf); for an anyof module,
// of the parent whose branch wins, taken as the shortest (the same rule as
// its path, api.LongestPath).
func betas(g *graph, results []moduleResult) []float64 {
	b := make([]float64, len(results))
	for i := range results {
		b[i] = g.parentBurst(i, func(p int) float64 { return results[p].burst })
	}
	return b
}

// weights returns each module's latency on a path: its WCL plus its parents' burst.
func weights(g *graph, results []moduleResult) []float64 {
	w := betas(g, results)
	for i, r := range results {
		w[i] += r.wcl
	}
	return w
}

func pathLength(g *graph, results []moduleResult) float64 {
	total, _ := g.longest(weights(g, results))
	return total
}

// planSingleHardware plans the session once per hardware type its models have
// profiles on and keeps the cheapest feasible plan (Picc-nh; Nexus and Clipper).
func planSingleHardware(cfg *api.Config, s *api.Session, pol policy) (api.SessionPlan, error) {
	seen := map[string]bool{}
	for _, m := range s.Modules {
		for _, p := range cfg.ProfilesOf(m.Model) {
			seen[p.Hardware] = true
		}
	}
	var best api.SessionPlan
	var firstErr error
	found := false
	for _, hw := range slices.Sorted(maps.Keys(seen)) {
		p := pol
		p.filter.hardware, p.singleHW = hw, false
		sp, err := planSession(cfg, s, p)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !found || sp.Cost < best.Cost-1e-9 {
			best, found = sp, true
		}
	}
	if !found {
		if firstErr == nil {
			firstErr = fmt.Errorf("session %q: %w: no hardware type has profiles for all its modules", s.Name, ErrInfeasible)
		}
		return api.SessionPlan{}, firstErr
	}
	return best, nil
}

// reassign gives the latency a module's config set leaves unused to the module whose
// cost drops most with it, greedily, until nothing improves (§III-C); pol.reassign
// bounds the rounds (Picc-0re: none, Picc-1re: one).
func reassign(g *graph, mods []moduleInput, results []moduleResult, slo float64, pol policy) {
	for round := 0; pol.reassign < 0 || round < pol.reassign; round++ {
		w := weights(g, results)
		_, through := g.longest(w)
		beta := betas(g, results)
		bestI, bestSave := -1, 1e-9
		var bestR moduleResult
		for i, m := range mods {
			maxL := slo - (through[i] - w[i]) - beta[i]
			if maxL <= results[i].wcl+latencyEps {
				continue
			}
			// A new config changes the bursts the module's children see: try
			// keeping its burst, then letting it grow.
			tries := []float64{0}
			if len(g.children[i]) > 0 && results[i].burst > 0 {
				tries = []float64{results[i].burst, 0}
			}
			for _, mb := range tries {
				gp := pol.gen
				gp.maxBurst = mb
				r, ok := planModule(m.cands, m.rate, maxL, gp, pol.dummy)
				if !ok || results[i].cost-r.cost <= bestSave {
					continue
				}
				old := results[i]
				results[i] = r
				fits := pathLength(g, results) <= slo+latencyEps
				results[i] = old
				if fits {
					bestI, bestSave, bestR = i, results[i].cost-r.cost, r
				}
			}
		}
		if bestI < 0 {
			return
		}
		results[bestI] = bestR
	}
}

// fanOutMachines gives a module with a fan-out distribution (Llama's
// input-dependent flow, api.Module.FanOut) the machines to run one parent
// item's items side by side. The k items of a parent item (k the
// api.ProvisionedQuantile of the distribution, FanOut.Provisioned) arrive at once and need
// n = ⌈k/b⌉ batches (b the largest batch of the module's groups, d the
// longest duration, L the module's budget, s). On m machines they take
// ⌈n/m⌉ rounds of d; the rounds must fit in a third of what the budget
// leaves after one batch, (L − d)/3, so that two more parent items' items
// arriving during the first's still finish in time (half was not enough: a
// detector finding 0 or 6 objects then met 99.55%, below the burst check's
// 99.9%). Where the module's machines
// (rounded up: each fractional machine is a machine of its own to the
// dispatcher) are fewer than that m, whole machines are added to its first
// group (the best throughput-cost ratio), and the cost with them; the WCL
// (Theorem 1: d + b/w, w the groups' rates) is unchanged. The paper plans a
// fan-out at its mean rate only, which a fractional machine carries: the
// simulation of a detector finding 0 or 12 objects (mean 3) on that plan
// met the SLO for 95% of requests against 100% at 3 a request
// (simulate/fanout_test.go; docs/planner.md, "Fan-out as a distribution").
func fanOutMachines(r *moduleResult, f api.FanOut, L float64) {
	k := f.Provisioned()
	if k < 2 || len(r.groups) == 0 {
		return
	}
	var have float64
	bMax, dMax := 0, 0.0
	for _, g := range r.groups {
		have += math.Ceil(g.machines - 1e-9)
		bMax = max(bMax, g.c.Batch)
		dMax = math.Max(dMax, g.c.Duration)
	}
	rounds := math.Floor((L - dMax) / 3 / dMax)
	if rounds < 1 {
		return // not even one round fits: the budget check reports the module
	}
	batches := math.Ceil(float64(k) / float64(bMax))
	need := math.Ceil(batches / rounds)
	if need <= have {
		return
	}
	r.groups[0].machines += need - have
	r.cost = 0
	for _, g := range r.groups {
		r.cost += g.machines * g.c.Price
	}
}

// sessionPlan writes the result in the plan shape. A module's WCL is its groups'
// worst plus the burst its parents pass it (betas). Final budgets share the slack of
// every path in proportion to the modules' WCLs (Algorithm 2 line 19 applied to the
// WCLs the config sets reach), so each budget is at least its module's WCL and
// every path's budgets add up to at most the SLO.
func sessionPlan(s *api.Session, g *graph, mods []moduleInput, results []moduleResult, slo float64, model LatencyModel) api.SessionPlan {
	w := weights(g, results)
	latency, _ := g.longest(w)
	budgets := scaleBudgets(g, w, slo)
	sp := api.SessionPlan{Name: s.Name, SLOMs: ms(slo), LatencyMs: ms(latency)}
	for i, m := range s.Modules {
		r := results[i]
		// A raced module (Cloudflow's competitive execution) runs every batch
		// on k machines at once, each copy on a device of its own: k times
		// the whole machines of each group planned for its rate (a fraction
		// rounded up: a copy cannot share its racer's device), and k times
		// their cost; its WCL is one machine's (the first answer is at least
		// as early). With a measured tail, the WCL and the machines per rate
		// are already those of the first of k answers (withTail).
		if m.Racers() > 1 {
			r.cost = 0
			for k := range r.groups {
				r.groups[k].machines = racedMachines(r.groups[k].machines, m.Racers())
				r.cost += r.groups[k].machines * r.groups[k].c.Price
			}
		}
		if len(m.FanOut) > 0 {
			fanOutMachines(&r, m.FanOut, budgets[i])
		}
		mp := api.ModulePlan{
			Name: m.Name, Model: m.Model, After: m.After, Join: m.Join, Tail: m.Tail, FanOut: m.FanOut, Rate: mods[i].rate, DummyRate: r.dummy,
			BudgetMs: ms(budgets[i]), WCLMs: ms(w[i]), Cost: r.cost, Configs: []api.GroupPlan{},
		}
		if m.Race > 1 {
			mp.Race = int(m.Race)
		}
		stream := streamRates(r.groups)
		gm := model
		if r.dummy > 0 {
			gm = withDummies(model)
		}
		for k, gr := range r.groups {
			gp := api.GroupPlan{
				Hardware: gr.c.Hardware, Price: gr.c.Price, Batch: gr.c.Batch, Concurrency: gr.c.Concurrency,
				DurationMs: ms(gr.c.profiledDuration()), Throughput: gr.c.profiledThroughput(), Machines: gr.machines,
				Rate: gr.rate, WCLMs: ms(gm.WCL(gr.c, stream[k])), Cost: gr.machines * gr.c.Price,
			}
			if gr.c.Duration != gr.c.profiledDuration() { // planned for a tail's slow batches (withTail)
				gp.TailMs = ms(gr.c.Duration)
			}
			mp.Configs = append(mp.Configs, gp)
		}
		sp.Cost += r.cost
		sp.Modules = append(sp.Modules, mp)
	}
	return sp
}

// racedMachines is the machines a group of m machines needs when each batch
// runs on k of them at once: k whole machines for every (started) machine.
func racedMachines(m float64, k int) float64 {
	return float64(k) * math.Ceil(m-1e-9)
}

func ms(s float64) float64 {
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return s
	}
	return s * 1000
}

// SplitCaps returns the caps that plan every session named in caps at its
// own (session name → cap in (0, 1]): the highest as
// Options.MaxUtilization, and the sessions below it as
// Options.SessionUtilization (nil when none is). 0 and nil for no caps.
func SplitCaps(caps map[string]float64) (float64, map[string]float64) {
	top := 0.0
	for _, u := range caps {
		top = max(top, u)
	}
	var below map[string]float64
	for name, u := range caps {
		if u < top {
			if below == nil {
				below = map[string]float64{}
			}
			below[name] = u
		}
	}
	return top, below
}

// CheckSessionUtilization returns an error naming the first session of caps
// (Options.SessionUtilization, in name order) that cfg does not have, and
// the sessions it has; nil when cfg has them all.
func CheckSessionUtilization(cfg *api.Config, caps map[string]float64) error {
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		if _, ok := cfg.Session(name); !ok {
			names := make([]string, len(cfg.Sessions))
			for i, s := range cfg.Sessions {
				names[i] = s.Name
			}
			return fmt.Errorf("%s: the config has no session %q (it has %s)", name, name, strings.Join(names, ", "))
		}
	}
	return nil
}
