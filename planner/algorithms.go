package planner

import (
	"fmt"
	"math"

	"github.com/piccolo-serving/piccolo/api"
)

// This file exports the paper's algorithms one by one, over exported types, for
// callers that want a step of the planner rather than a whole plan (Plan).

// ConfigGroup is one config group of a module's config set: Machines machines
// (fractional for the one partial machine) running Config, sharing one batch
// stream and carrying Rate req/s, dummies included.
type ConfigGroup struct {
	Config   Candidate
	Machines float64
	Rate     float64
}

// ConfigSet is a module's config set: its groups in throughput-cost order, the
// dummy rate added to its stream (req/s, §III-D), its cost (cost units: Σ machines
// × price), its WCL (seconds, the worst over its groups) and the burst it passes
// its children (seconds: the longest gap between two of its batch completions).
type ConfigSet struct {
	Groups    []ConfigGroup
	DummyRate float64
	Cost      float64
	WCL       float64
	Burst     float64
}

// ConfigParams selects the form of Algorithm 1 the exported algorithms run.
type ConfigParams struct {
	// Model is the latency model GetWCL uses (nil: TCExact).
	Model LatencyModel
	// Grouped plans one group per module whose machines share one batch stream
	// (policy piccolo); false runs Algorithm 1 as published (policy paper).
	Grouped bool
	// MaxConfigs bounds the distinct configs per module (0: no bound).
	MaxConfigs int
	// MaxUtilization is the share of a machine's profiled throughput a plan may
	// use, in (0, 1] (0: 1, no headroom).
	MaxUtilization float64
}

func (p ConfigParams) gen() (genParams, error) {
	g := genParams{model: p.Model, grouped: p.Grouped, maxConfigs: p.MaxConfigs, util: p.MaxUtilization}
	if g.model == nil {
		g.model = TCExact
	}
	if g.util == 0 {
		g.util = 1
	}
	switch {
	case g.util < 0 || g.util > 1 || math.IsNaN(g.util):
		return g, fmt.Errorf("max utilization %v: must be in (0, 1] (1 = no headroom)", p.MaxUtilization)
	case g.maxConfigs < 0:
		return g, fmt.Errorf("max configs %d: must be ≥ 0 (0 = no bound)", p.MaxConfigs)
	}
	return g, nil
}

// Candidates returns the configs model may run with in cfg, on every hardware type
// it has profiles for, in throughput-cost order (Algorithm 1 line 1, §III-B), or an
// error when the model has no usable profile entry.
func Candidates(cfg *api.Config, model string) ([]Candidate, error) {
	return candidates(cfg, model, filter{})
}

// GenerateConfigs is Algorithm 1 (§III-B): the config set for a module of rate
// req/s within a latency budget of budget seconds, cands in throughput-cost order
// (Candidates).
//
//	rw ← T_M; k ← 0
//	while rw > 0:
//	    c ← P_M[k]
//	    if GetWCL(c, rw) ≤ L_M:           // Theorem 1: d + b/w under TC dispatch
//	        n ← rw / t_c
//	        if n ≥ 1: run ⌊n⌋ machines at c at full capacity; rw ← rw − ⌊n⌋·t_c
//	        else:     run one partial machine at c for rw; rw ← 0
//	    else: k ← k + 1
//
// With p.Grouped the machines of one config share one batch stream, and the set is
// the cheapest single group whose WCL fits. It returns an error wrapping
// ErrInfeasible when no config serves the residual within the budget.
func GenerateConfigs(cands []Candidate, rate, budget float64, p ConfigParams) (ConfigSet, error) {
	g, err := checkModuleArgs(cands, rate, budget, p)
	if err != nil {
		return ConfigSet{}, err
	}
	r, failedAt, ok := generateConfigs(cands, rate, budget, g)
	if !ok {
		return ConfigSet{}, fmt.Errorf("%w: no config serves the residual %.4g req/s within %s", ErrInfeasible, failedAt, fmtSeconds(budget))
	}
	return r.export(), nil
}

// GenerateDummy is Algorithm 1 followed by the dummy generator (§III-D, Theorem 2:
// in the cost-minimum config set each config's leftover workload
// u_i = Σ_{j>i} n_j·t_j is below its throughput t_i). For each config c_i of the set
// it tries the dummy rate dum_i = b_i/(L − d_i) − u_i that lets c_i collect its own
// leftover's batches in time, and keeps the cheapest set, dummy machines included;
// the set without dummies when none is cheaper. When Algorithm 1 alone fails it
// raises the failing residual until some config fits. Errors as GenerateConfigs.
func GenerateDummy(cands []Candidate, rate, budget float64, p ConfigParams) (ConfigSet, error) {
	g, err := checkModuleArgs(cands, rate, budget, p)
	if err != nil {
		return ConfigSet{}, err
	}
	r, ok := planModule(cands, rate, budget, g, true)
	if !ok {
		return ConfigSet{}, fmt.Errorf("%w: no config set serves %.4g req/s within %s, with or without dummies", ErrInfeasible, rate, fmtSeconds(budget))
	}
	return r.export(), nil
}

func checkModuleArgs(cands []Candidate, rate, budget float64, p ConfigParams) (genParams, error) {
	g, err := p.gen()
	switch {
	case err != nil:
		return g, err
	case len(cands) == 0:
		return g, fmt.Errorf("no candidate configs")
	case !(rate >= 0) || math.IsInf(rate, 1):
		return g, fmt.Errorf("rate %v req/s: must be finite and ≥ 0", rate)
	case !(budget > 0):
		return g, fmt.Errorf("budget %v s: must be > 0", budget)
	}
	return g, nil
}

// SplitLatency is Algorithm 2 (§III-C): it splits session s's SLO among its
// modules and returns each module's latency budget in seconds, in s.Modules order.
//
//	DAG ← every module at its config of least WCL (the default DAG, line 2)
//	repeat:
//	    among every config c of every module M, pick the one of highest
//	    latency-cost efficiency (cost(DAG_M) − cost(c)) / (WCL(c) − WCL(DAG_M))
//	    (line 11) whose move keeps GetLat(DAG) ≤ SLO (line 13); DAG_M ← c
//	until no move fits
//	L_M ← WCL(DAG_M) / (longest path through M) × SLO   (line 19)
//
// A module's WCL is taken at its whole rate on one config; a module with children
// also counts the burst it passes them on every path, and its budget includes
// that burst. Errors name a module without usable profiles or an invalid DAG.
func SplitLatency(cfg *api.Config, s *api.Session, p ConfigParams) ([]float64, error) {
	gp, g, mods, err := sessionArgs(cfg, s, p)
	if err != nil {
		return nil, err
	}
	budgets, allow := splitLatency(g, mods, s.SLO.Seconds(), gp.model, gp.util, SplitLC)
	for i := range budgets {
		budgets[i] += allow[i]
	}
	return budgets, nil
}

// Reassign gives the latency the config sets of session s leave unused to the
// module whose cost drops most with it, greedily, until nothing improves (§III-C,
// "Reassigning the remaining latency budget"): each module may grow to the SLO
// minus the longest path through it, bursts included, and is planned anew by
// GenerateDummy. sets holds one config set per module in s.Modules order (from
// GenerateConfigs or GenerateDummy); Reassign returns the new sets and leaves sets
// unchanged.
func Reassign(cfg *api.Config, s *api.Session, sets []ConfigSet, p ConfigParams) ([]ConfigSet, error) {
	gp, g, mods, err := sessionArgs(cfg, s, p)
	if err != nil {
		return nil, err
	}
	if len(sets) != len(mods) {
		return nil, fmt.Errorf("session %q: %d config sets for %d modules", s.Name, len(sets), len(mods))
	}
	results := make([]moduleResult, len(sets))
	for i, cs := range sets {
		results[i] = cs.internal(gp.model)
	}
	reassign(g, mods, results, s.SLO.Seconds(), policy{gen: gp, dummy: true, reassign: -1})
	out := make([]ConfigSet, len(results))
	for i, r := range results {
		out[i] = r.export()
	}
	return out, nil
}

// sessionArgs validates p and reads session s for SplitLatency and Reassign.
func sessionArgs(cfg *api.Config, s *api.Session, p ConfigParams) (genParams, *graph, []moduleInput, error) {
	gp, err := p.gen()
	if err != nil {
		return gp, nil, nil, err
	}
	g, mods, err := sessionInputs(cfg, s, filter{})
	return gp, g, mods, err
}

func (r moduleResult) export() ConfigSet {
	cs := ConfigSet{DummyRate: r.dummy, Cost: r.cost, WCL: r.wcl, Burst: r.burst}
	for _, g := range r.groups {
		cs.Groups = append(cs.Groups, ConfigGroup{Config: g.c, Machines: g.machines, Rate: g.rate})
	}
	return cs
}

// internal recomputes cost, WCL and burst from the groups under m.
func (cs ConfigSet) internal(m LatencyModel) moduleResult {
	groups := make([]group, len(cs.Groups))
	for i, g := range cs.Groups {
		groups[i] = group{c: g.Config, machines: g.Machines, rate: g.Rate}
	}
	return finish(groups, cs.DummyRate, m)
}
