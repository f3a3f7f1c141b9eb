package scheduler

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Plan plans every session of cfg with the policy and options in o and returns the
// plan in the DESIGN.md shape. A session that cannot meet its SLO gets an error
// naming it, the fastest latency it could reach and its SLO (wrapping
// ErrInfeasible); the other sessions are still planned, and the returned error
// joins the sessions' errors. Invalid options return a nil plan and an error.
func Plan(cfg *api.Config, o Options) (*api.Plan, error) {
	pol, err := resolve(o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out := &api.Plan{Policy: pol.name, LatencyModel: pol.model.Name(), MaxUtilization: pol.gen.util}
	if pol.optimal {
		out.Policy = "optimal"
	}
	var errs []error
	for i := range cfg.Sessions {
		sp, err := planSession(cfg, &cfg.Sessions[i], pol)
		if err != nil {
			errs = append(errs, err)
			sp = api.SessionPlan{Name: cfg.Sessions[i].Name, SLOMs: ms(cfg.Sessions[i].SLO.Seconds()), Error: err.Error()}
		}
		out.TotalCost += sp.Cost
		out.Sessions = append(out.Sessions, sp)
	}
	out.RuntimeMs = float64(time.Since(start).Microseconds()) / 1000
	return out, errors.Join(errs...)
}

func planSession(cfg *api.Config, s *api.Session, pol policy) (api.SessionPlan, error) {
	if pol.singleHW && pol.filter.hardware == "" {
		return planSingleHardware(cfg, s, pol)
	}
	g, err := newGraph(s)
	if err != nil {
		return api.SessionPlan{}, err
	}
	slo := s.SLO.Seconds()
	mods := make([]moduleInput, len(s.Modules))
	for i, m := range s.Modules {
		cands, err := candidates(cfg, m.Model, pol.filter)
		if err != nil {
			return api.SessionPlan{}, fmt.Errorf("session %q module %q: %w", s.Name, m.Name, err)
		}
		mods[i] = moduleInput{name: m.Name, rate: m.Rate, cands: cands}
	}
	if w, total := fastest(g, mods, pol.model, pol.gen.util); total > slo+latencyEps && !(pol.dummy && pol.model.RateDependent()) {
		return api.SessionPlan{}, infeasibleError(s.Name, g, w, total, slo)
	}
	var results []moduleResult
	switch {
	case pol.optimal:
		results, err = searchSplit(g, mods, slo, pol, optimalOptions)
	case pol.split == splitQuantized:
		results, err = searchSplit(g, mods, slo, pol, quantizedOptions)
	default:
		budgets := splitLatency(g, mods, slo, pol.model, pol.gen.util, pol.split)
		results = make([]moduleResult, len(mods))
		for i, m := range mods {
			r, ok := planModule(m.cands, m.rate, budgets[i], pol.gen, pol.dummy)
			if !ok {
				err = fmt.Errorf("module %q: %w: no config set serves %.4g req/s within its budget %s (policy %s, latency model %s)",
					m.name, ErrInfeasible, m.rate, fmtSeconds(budgets[i]), pol.name, pol.model.Name())
				break
			}
			results[i] = r
		}
	}
	if err != nil {
		if w, total := fastest(g, mods, pol.model, pol.gen.util); total > slo+latencyEps {
			return api.SessionPlan{}, infeasibleError(s.Name, g, w, total, slo)
		}
		return api.SessionPlan{}, fmt.Errorf("session %q: %w", s.Name, err)
	}
	if !pol.optimal {
		reassign(g, mods, results, slo, pol)
	}
	return sessionPlan(s, g, mods, results, slo, pol.model), nil
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
	for _, hw := range sortedKeys(seen) {
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
		w := wcls(results)
		_, through := g.longest(w)
		bestI, bestSave := -1, 1e-9
		var bestR moduleResult
		for i, m := range mods {
			maxL := slo - (through[i] - w[i])
			if maxL <= w[i]+latencyEps {
				continue
			}
			r, ok := planModule(m.cands, m.rate, maxL, pol.gen, pol.dummy)
			if ok && results[i].cost-r.cost > bestSave {
				bestI, bestSave, bestR = i, results[i].cost-r.cost, r
			}
		}
		if bestI < 0 {
			return
		}
		results[bestI] = bestR
	}
}

func wcls(results []moduleResult) []float64 {
	w := make([]float64, len(results))
	for i, r := range results {
		w[i] = r.wcl
	}
	return w
}

// sessionPlan writes the result in the plan shape. Final budgets share the slack of
// every path in proportion to the modules' WCLs (Algorithm 2 line 19 applied to the
// WCLs the config sets reach), so each budget is at least its module's WCL and
// every path's budgets add up to at most the SLO.
func sessionPlan(s *api.Session, g *graph, mods []moduleInput, results []moduleResult, slo float64, model Model) api.SessionPlan {
	w := wcls(results)
	latency, _ := g.longest(w)
	budgets := scaleBudgets(g, w, slo)
	sp := api.SessionPlan{Name: s.Name, SLOMs: ms(slo), LatencyMs: ms(latency)}
	for i, m := range s.Modules {
		r := results[i]
		mp := api.ModulePlan{
			Name: m.Name, Model: m.Model, After: m.After, Rate: mods[i].rate, DummyRate: r.dummy,
			BudgetMs: ms(budgets[i]), WCLMs: ms(r.wcl), Cost: r.cost, Configs: []api.GroupPlan{},
		}
		stream := streamRates(r.groups)
		gm := model
		if r.dummy > 0 {
			gm = withDummies(model)
		}
		for k, gr := range r.groups {
			mp.Configs = append(mp.Configs, api.GroupPlan{
				Hardware: gr.c.Hardware, Price: gr.c.Price, Batch: gr.c.Batch, Concurrency: gr.c.Concurrency,
				DurationMs: ms(gr.c.Duration), Throughput: gr.c.Throughput, Machines: gr.machines,
				Rate: gr.rate, WCLMs: ms(gm.WCL(gr.c, stream[k])), Cost: gr.machines * gr.c.Price,
			})
		}
		sp.Cost += r.cost
		sp.Modules = append(sp.Modules, mp)
	}
	return sp
}

func ms(s float64) float64 {
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return s
	}
	return s * 1000
}
