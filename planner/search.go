package planner

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

// optionsFunc lists a module's options for a search, or says why it cannot.
type optionsFunc func(m moduleInput, slo float64, pol policy) ([]option, error)

// quantizedOptions gives a module every budget that is a multiple of the quantum up
// to the SLO, planned by the policy's own Algorithm 1 and dummy generator (Nexus's
// quantized interval; Picc-q0.01 and Picc-q0.1).
func quantizedOptions(m moduleInput, slo float64, pol policy) ([]option, error) {
	var out []option
	for k := 1; float64(k)*pol.quantum <= slo+latencyEps; k++ {
		L := float64(k) * pol.quantum
		if r, ok := planModule(m.cands, m.rate, L, pol.gen, pol.dummy); ok {
			out = append(out, option{latency: L, r: r})
		}
	}
	return out, nil
}

// optimalGrid is the number of even steps of the SLO that the brute force tries as
// a module budget, besides every config's own WCL at the module rate.
const optimalGrid = 200

// optimalOptions gives a module every config set the optimum's form allows
// (optimalModule) at every budget on a grid of SLO/optimalGrid and at every
// config's WCL at the module rate: not only the cheapest set at each budget, since
// a dearer set may pass a shorter burst to the module's children.
func optimalOptions(m moduleInput, slo float64, pol policy) ([]option, error) {
	return listOptimal(m, slo, pol, true)
}

// listOptimal is optimalOptions; with prune false the paper form's search keeps
// every complete config set (for the test against plain enumeration).
func listOptimal(m moduleInput, slo float64, pol policy, prune bool) ([]option, error) {
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
		rs, complete := optimalModule(m.cands, m.rate, L, pol, prune)
		if !complete {
			return nil, fmt.Errorf("module %q: the exhaustive search stopped after %d nodes at budget %s; no exact optimum", m.name, maxFillNodes, fmtSeconds(L))
		}
		for _, r := range rs {
			out = append(out, option{latency: r.wcl, r: r})
		}
	}
	return out, nil
}

// frontier keeps the options that no other option rules out, sorted by cost
// ascending. An option is ruled out when another one is no worse in every term the
// search adds up on a path: latency, cost and, where the module has children, the
// burst it passes them (burstOf). Pruning on latency and cost alone would drop a
// cheap option whose short burst lets a child run cheaper.
func frontier(opts []option, hasChildren bool) []option {
	burst := func(o option) float64 {
		if hasChildren {
			return o.r.burst
		}
		return 0
	}
	sort.Slice(opts, func(i, j int) bool {
		a, b := opts[i], opts[j]
		if a.r.cost != b.r.cost {
			return a.r.cost < b.r.cost
		}
		if a.latency != b.latency {
			return a.latency < b.latency
		}
		return burst(a) < burst(b)
	})
	var out []option
next:
	for _, o := range opts {
		// Every kept option costs no more than o.
		for _, k := range out {
			if k.latency <= o.latency+latencyEps && burst(k) <= burst(o)+latencyEps && k.r.cost <= o.r.cost+1e-12 {
				continue next
			}
		}
		out = append(out, o)
	}
	return out
}

// searchSplit finds, by branch and bound over every module's options, the
// assignment of minimum total cost whose every DAG path fits the SLO.
func searchSplit(g *graph, mods []moduleInput, slo float64, pol policy, list optionsFunc) ([]moduleResult, error) {
	n := len(mods)
	opts := make([][]option, n)
	for i, m := range mods {
		o, err := list(m, slo, pol)
		if err != nil {
			return nil, err
		}
		opts[i] = frontier(o, len(g.children[i]) > 0)
		if len(opts[i]) == 0 {
			return nil, fmt.Errorf("module %q: %w: no config set serves %.4g req/s within the SLO %s (policy %s)",
				m.name, ErrInfeasible, m.rate, fmtSeconds(slo), pol.name)
		}
	}
	// minLat[i]: module i's shortest latency over its options.
	minLat := make([]float64, n)
	for i := range opts {
		minLat[i] = math.Inf(1)
		for _, o := range opts[i] {
			minLat[i] = math.Min(minLat[i], o.latency)
		}
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
		restCost[k] = restCost[k+1] + o[0].r.cost
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
		// An anyof module starts with its first parent (api.LongestPath).
		start := 0.0
		anyOf := g.dag.AnyOf != nil && g.dag.AnyOf[i]
		for k, p := range g.parents[i] {
			if k == 0 || !anyOf && finish[p] > start || anyOf && finish[p] < start {
				start = finish[p]
			}
		}
		start += g.parentBurst(i, func(p int) float64 { return opts[p][choice[p]].r.burst })
		o := opts[i]
		// From the cheapest option up: once the bound fails, every remaining
		// option is dearer and fails too.
		for j := range o {
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

// optimalModule returns every config set for rate T within L seconds under pol's
// latency model and config-set form, exhaustively:
//
//   - grouped form (piccolo) and rate-independent models (2d, d + b/t): one group
//     of each config, with the smallest dummy rate that makes it feasible where
//     dummies are allowed (a later group's stream is a subset of the first's, so
//     moving its load to the first group never raises WCL, cost or burst);
//   - the paper's form: every ordered config set in which each config takes as
//     many full machines as fit and the residual goes on to the later configs,
//     ending in one group (padded with dummies to the rate that config needs
//     where the residual is too slow a stream), or in one group of fractional
//     machines carrying the whole residual, or in that group with its leftover
//     padded to what the config needs (Theorem 2) (fillSearch).
//
// The sets are not pruned by cost alone: the search (frontier) needs the dearer ones
// whose burst or WCL is shorter. With prune, the paper form keeps only the sets no
// other one beats on WCL, cost and burst together; it reports false when its search
// stopped at maxFillNodes.
func optimalModule(cands []Candidate, T, L float64, pol policy, prune bool) ([]moduleResult, bool) {
	if T <= rateEps {
		return []moduleResult{{}}, true
	}
	p := pol.gen
	var out []moduleResult
	if p.grouped || !p.model.RateDependent() {
		for _, c := range cands {
			rate, ok := groupRate(c, T, L, 0, p.model, pol.dummy)
			if ok {
				out = append(out, finish([]group{{c: c, machines: rate / (p.util * c.Throughput), rate: rate}}, rate-T, p.model))
			}
		}
		return out, true
	}
	s := fillSearch{cands: cands, L: L, p: p, dummy: pol.dummy, keepAll: !prune}
	s.run(T, 0)
	if s.truncated {
		return s.found, false
	}
	return s.found, true
}

// groupRate returns the stream rate at which one group of c serves T req/s within
// L seconds at a stream of at least minRate req/s: T, or with dummies the rate
// needed when T is too slow to collect c's batches in time (§III-D). It reports
// false when no rate fits.
func groupRate(c Candidate, T, L, minRate float64, m LatencyModel, dummy bool) (float64, bool) {
	need := math.Max(m.Need(c, L), minRate)
	if need <= T+rateEps {
		return T, true
	}
	if !dummy || !m.RateDependent() || math.IsInf(need, 1) {
		return 0, false
	}
	// With dummies in the stream the model may be more conservative.
	rate := math.Max(need, withDummies(m).Need(c, L))
	return rate, !math.IsInf(rate, 1)
}

// fillSearch is the exhaustive search over the paper's config sets. It keeps, of
// the complete sets it meets, those no other one beats on WCL, cost and burst
// together (the search's frontier would drop the rest anyway), so its memory is
// that frontier, not the tree.
type fillSearch struct {
	cands []Candidate
	L     float64
	p     genParams
	dummy bool
	found []moduleResult
	stack []group // the groups of the current node
	// keepAll keeps every complete set, beaten or not.
	keepAll bool
	nodes   int
	// truncated is set when the search stopped at maxFillNodes.
	truncated bool
}

// maxFillNodes bounds one module's exhaustive search at one budget; the optimum
// reports an error rather than a plan when a search stops there.
const maxFillNodes = 2_000_000

func (s *fillSearch) run(rw float64, k0 int) {
	s.nodes++
	if s.nodes > maxFillNodes {
		s.truncated = true
		return
	}
	if rw <= rateEps {
		s.record(0)
		return
	}
	for k := k0; k < len(s.cands); k++ {
		c := s.cands[k]
		capacity := s.p.util * c.Throughput
		need := s.p.model.Need(c, s.L)
		n := len(s.stack)
		switch {
		case need > rw+rateEps:
			// Too slow a stream for c: pad the residual with dummies up to what c
			// needs, in one group (§III-D; a partial machine, or fractional
			// machines as Algorithm 1 plans its last config under a bound on
			// configs).
			need = math.Max(need, withDummies(s.p.model).Need(c, s.L))
			if s.dummy && !math.IsInf(need, 1) {
				s.stack = append(s.stack, group{c: c, machines: need / capacity, rate: need})
				s.record(need - rw)
			}
		case rw <= capacity*(1+1e-12):
			s.stack = append(s.stack, group{c: c, machines: rw / capacity, rate: rw})
			s.record(0)
		default:
			full := math.Floor(rw/capacity + 1e-9)
			s.stack = append(s.stack, group{c: c, machines: full, rate: full * capacity})
			s.run(rw-full*capacity, k)
			// c takes all of rw as one group of fractional machines sharing one
			// stream (Algorithm 1's last config under a bound on configs,
			// Picc-1bpc/2bpc).
			s.stack[n] = group{c: c, machines: rw / capacity, rate: rw}
			s.record(0)
			// Theorem 2 (§III-D): the leftover u after c's full machines padded
			// with dummies up to what c needs, in the same stream.
			u := rw - full*capacity
			if nd := withDummies(s.p.model).Need(c, s.L); s.dummy && u > rateEps && nd > u && nd <= capacity {
				rate := full*capacity + nd
				s.stack[n] = group{c: c, machines: rate / capacity, rate: rate}
				s.record(nd - u)
			}
		}
		s.stack = s.stack[:n]
	}
}

// record keeps the current complete set unless a kept one is no worse in WCL,
// cost and burst; it drops the kept ones the new set beats. A set's latency is its
// WCL under the model it is checked with (with dummies in the stream, withDummies
// for every group).
func (s *fillSearch) record(dummy float64) {
	m := s.p.model
	if dummy > 0 {
		m = withDummies(m)
	}
	cost, wcl, w := 0.0, 0.0, 0.0
	for i := len(s.stack) - 1; i >= 0; i-- {
		g := s.stack[i]
		w += g.rate
		cost += g.machines * g.c.Price
		wcl = math.Max(wcl, m.WCL(g.c, w))
	}
	burst := burstOf(s.stack)
	if s.keepAll {
		s.found = append(s.found, finish(append([]group(nil), s.stack...), dummy, s.p.model))
		return
	}
	for _, f := range s.found {
		if f.wcl <= wcl+latencyEps && f.cost <= cost+1e-12 && f.burst <= burst+latencyEps {
			return
		}
	}
	kept := s.found[:0]
	for _, f := range s.found {
		if !(wcl <= f.wcl+latencyEps && cost <= f.cost+1e-12 && burst <= f.burst+latencyEps) {
			kept = append(kept, f)
		}
	}
	s.found = append(kept, finish(append([]group(nil), s.stack...), dummy, s.p.model))
}
