package scheduler

import (
	"fmt"
	"math"
	"sort"
)

// option is one way to run a module: the config set r, and the latency it takes on
// every path through the module (its budget for a quantized split, its WCL for the
// optimum).
type option struct {
	latency float64
	r       moduleResult
}

// optionsFunc lists a module's options for a search.
type optionsFunc func(m moduleInput, slo float64, pol policy) []option

// quantizedOptions gives a module every budget that is a multiple of the quantum up
// to the SLO, planned by the policy's own Algorithm 1 and dummy generator (Nexus's
// quantized interval; Picc-q0.01 and Picc-q0.1).
func quantizedOptions(m moduleInput, slo float64, pol policy) []option {
	var out []option
	for k := 1; float64(k)*pol.quantum <= slo+latencyEps; k++ {
		L := float64(k) * pol.quantum
		if r, ok := planModule(m.cands, m.rate, L, pol.gen, pol.dummy); ok {
			out = append(out, option{latency: L, r: r})
		}
	}
	return out
}

// optimalGrid is the number of even steps of the SLO that the brute force tries as
// a module budget, besides every config's own WCL at the module rate.
const optimalGrid = 200

// optimalOptions gives a module the cheapest config set (optimalModule) at every
// budget on a grid of SLO/optimalGrid and at every config's WCL at the module rate.
func optimalOptions(m moduleInput, slo float64, pol policy) []option {
	budgets := make([]float64, 0, optimalGrid+len(m.cands))
	for k := 1; k <= optimalGrid; k++ {
		budgets = append(budgets, slo*float64(k)/optimalGrid)
	}
	for _, c := range m.cands {
		if l := pol.model.WCL(c, m.rate); l <= slo {
			budgets = append(budgets, l)
		}
	}
	var out []option
	for _, L := range budgets {
		if r, ok := optimalModule(m.cands, m.rate, L, pol); ok {
			out = append(out, option{latency: r.wcl, r: r})
		}
	}
	return out
}

// frontier keeps the options that no other option beats on both latency and cost,
// sorted by latency ascending (so cost strictly descends).
func frontier(opts []option) []option {
	sort.Slice(opts, func(i, j int) bool {
		if opts[i].latency != opts[j].latency {
			return opts[i].latency < opts[j].latency
		}
		return opts[i].r.cost < opts[j].r.cost
	})
	var out []option
	for _, o := range opts {
		if len(out) == 0 || o.r.cost < out[len(out)-1].r.cost-1e-12 {
			out = append(out, o)
		}
	}
	return out
}

// searchSplit finds, by branch and bound over every module's options, the
// assignment of minimum total cost whose every DAG path fits the SLO.
func searchSplit(g *graph, mods []moduleInput, slo float64, pol policy, list optionsFunc) ([]moduleResult, error) {
	n := len(mods)
	opts := make([][]option, n)
	for i, m := range mods {
		opts[i] = frontier(list(m, slo, pol))
		if len(opts[i]) == 0 {
			return nil, fmt.Errorf("module %q: %w: no config set serves %.4g req/s within the SLO %s (policy %s)",
				m.name, ErrInfeasible, m.rate, fmtSeconds(slo), pol.name)
		}
	}
	// minTail[i]: the shortest possible latency after module i to a sink.
	minLat := make([]float64, n)
	for i := range opts {
		minLat[i] = opts[i][0].latency
	}
	tailFrom := make([]float64, n) // longest path starting at i (including i) under minLat
	for k := n - 1; k >= 0; k-- {
		i := g.topo[k]
		best := 0.0
		for _, c := range g.children[i] {
			best = math.Max(best, tailFrom[c])
		}
		tailFrom[i] = best + minLat[i]
	}
	// restCost[k]: the cheapest possible cost of the modules from topo position k on.
	restCost := make([]float64, n+1)
	for k := n - 1; k >= 0; k-- {
		o := opts[g.topo[k]]
		restCost[k] = restCost[k+1] + o[len(o)-1].r.cost
	}
	finish := make([]float64, n)
	choice := make([]int, n)
	bestChoice := make([]int, n)
	bestCost := math.Inf(1)
	var dfs func(k int, cost float64)
	dfs = func(k int, cost float64) {
		if k == n {
			if cost < bestCost-1e-12 {
				bestCost = cost
				copy(bestChoice, choice)
			}
			return
		}
		i := g.topo[k]
		// The latest parent's finish, plus the longest burst any parent passes on
		// (betas, burstOf).
		start, beta := 0.0, 0.0
		for _, p := range g.parents[i] {
			start = math.Max(start, finish[p])
			beta = math.Max(beta, opts[p][choice[p]].r.burst)
		}
		start += beta
		o := opts[i]
		// From the cheapest (longest) option down: once the bound fails, every
		// remaining option is dearer and fails too.
		for j := len(o) - 1; j >= 0; j-- {
			if cost+o[j].r.cost+restCost[k+1] >= bestCost-1e-12 {
				break
			}
			if start+o[j].latency+tailFrom[i]-minLat[i] > slo+latencyEps {
				continue
			}
			finish[i] = start + o[j].latency
			choice[i] = j
			dfs(k+1, cost+o[j].r.cost)
		}
	}
	dfs(0, 0)
	if math.IsInf(bestCost, 1) {
		return nil, fmt.Errorf("%w: no combination of module config sets fits the SLO %s (policy %s)", ErrInfeasible, fmtSeconds(slo), pol.name)
	}
	out := make([]moduleResult, n)
	for i := range out {
		out[i] = opts[i][bestChoice[i]].r
	}
	return out, nil
}

// optimalModule returns the cheapest config set for rate T within L seconds under
// pol's latency model and config-set form, exhaustively:
//
//   - grouped form (piccolo) and rate-independent models (2d, d + b/t): one group
//     of the best config is optimal (a later group's stream is a subset of the
//     first's, so moving its load to the first group never raises WCL or cost), so
//     the search is over every config, with the smallest dummy that makes it
//     feasible where dummies are allowed;
//   - the paper's form: every ordered config set in which each config takes as
//     many full machines as fit and the residual goes on to the later configs,
//     ending in one partial machine, optionally padded with dummies to the rate
//     that config needs (exhaustiveFill).
func optimalModule(cands []Candidate, T, L float64, pol policy) (moduleResult, bool) {
	if T <= rateEps {
		return moduleResult{}, true
	}
	p := pol.gen
	if p.grouped || !p.model.RateDependent() {
		// For a rate-independent model a fractional group of the best feasible
		// config costs what full machines plus one partial machine cost.
		return bestSingleGroup(cands, T, L, p, pol.dummy)
	}
	s := fillSearch{cands: cands, L: L, p: p, dummy: pol.dummy, best: math.Inf(1)}
	s.run(T, 0, 0, nil)
	if math.IsInf(s.best, 1) {
		return moduleResult{}, false
	}
	return finish(s.bestGroups, s.bestDummy, p.model), true
}

// fillSearch is the exhaustive search over the paper's config sets.
type fillSearch struct {
	cands      []Candidate
	L          float64
	p          genParams
	dummy      bool
	best       float64
	bestGroups []group
	bestDummy  float64
	nodes      int
}

// maxFillNodes bounds one module's exhaustive search; the search is complete for
// every workload of the planner benchmark well inside it.
const maxFillNodes = 2_000_000

func (s *fillSearch) run(rw float64, k0 int, cost float64, groups []group) {
	s.nodes++
	if s.nodes > maxFillNodes || cost >= s.best-1e-12 {
		return
	}
	if rw <= rateEps {
		s.record(cost, groups, 0)
		return
	}
	for k := k0; k < len(s.cands); k++ {
		c := s.cands[k]
		capacity := s.p.util * c.Throughput
		need := s.p.model.Need(c, s.L)
		if need > rw+rateEps {
			// Too slow a stream for c: pad the residual with dummies up to what c
			// needs, on one partial machine (§III-D).
			need = math.Max(need, withDummies(s.p.model).Need(c, s.L))
			if s.dummy && need <= capacity && !math.IsInf(need, 1) {
				g := append(groups[:len(groups):len(groups)], group{c: c, machines: need / capacity, rate: need})
				s.record(cost+c.Price*need/capacity, g, need-rw)
			}
			continue
		}
		if rw <= capacity*(1+1e-12) {
			g := append(groups[:len(groups):len(groups)], group{c: c, machines: rw / capacity, rate: rw})
			s.record(cost+c.Price*rw/capacity, g, 0)
			continue
		}
		full := math.Floor(rw/capacity + 1e-9)
		g := append(groups[:len(groups):len(groups)], group{c: c, machines: full, rate: full * capacity})
		s.run(rw-full*capacity, k, cost+full*c.Price, g)
	}
}

func (s *fillSearch) record(cost float64, groups []group, dummy float64) {
	if cost < s.best-1e-12 {
		s.best = cost
		s.bestGroups = groups
		s.bestDummy = dummy
	}
}
