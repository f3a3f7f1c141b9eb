package planner

import (
	"math"
	"slices"
)

// planModule returns the cheapest config set for a module of rate T req/s within L
// seconds: Algorithm 1, then, when dummy is on and the latency model depends on the
// rate, the dummy generator of §III-D. A dummy rate is kept only if the total cost,
// dummy machines included, strictly drops. Reports false when nothing fits.
func planModule(cands []Candidate, T, L float64, p genParams, dummy bool) (moduleResult, bool) {
	if p.grouped || !p.model.RateDependent() {
		if T <= rateEps {
			return moduleResult{}, true
		}
		if p.grouped {
			return bestSingleGroup(cands, T, L, p, dummy)
		}
	}
	base, failedAt, ok := generateConfigs(cands, T, L, p)
	if !dummy || !p.model.RateDependent() || T <= rateEps {
		return base, ok
	}
	best, found := base, ok
	try := func(d float64) {
		if !(d > rateEps) || math.IsInf(d, 0) {
			return
		}
		pd := p
		pd.model = withDummies(p.model)
		r, _, ok := generateConfigs(cands, T+d, L, pd)
		if !ok {
			return
		}
		r.dummy = d
		if !found || r.cost < best.cost-1e-9 {
			best, found = r, true
		}
	}
	switch {
	case ok:
		// Theorem 2: config c_i should process its own leftover workload
		// u_i = Σ_{j>i} n_j t_j; dum_i = b_i/(L − d_i) − u_i (§III-D).
		w := streamRates(base.groups)
		for i, g := range base.groups {
			u := w[i] - g.rate
			if u < p.util*g.c.Throughput {
				try(withDummies(p.model).Need(g.c, L) - u)
			}
		}
	default:
		// Algorithm 1 found no config for the residual failedAt. Rescue 1: raise
		// the module's rate by each config's need minus the residual and run
		// Algorithm 1 again; full machines may absorb the raise, so this only
		// succeeds where the need is far above the rate (a detector at 31.6
		// req/s padded with 1922 req/s of dummies on the former profiles).
		for _, c := range cands {
			try(withDummies(p.model).Need(c, L) - failedAt)
		}
		// Rescue 2: keep the groups Algorithm 1 planned and put the residual,
		// padded to exactly a config's need, on one partial machine of that
		// config (Theorem 2's dum_i for a config of its own): its stream is
		// the need, so it collects its batches in time, and every group before
		// it only gains stream rate.
		for _, r := range rescueResidual(cands, base.groups, failedAt, L, p) {
			if !found || r.cost < best.cost-1e-9 {
				best, found = r, true
			}
		}
	}
	return best, found
}

// rescueResidual returns, for every config c whose need (the stream at which
// it collects a batch within L, dummies in it) lies between the residual and
// one machine's capacity, the set planned plus one partial machine of c
// carrying the residual and need − residual of dummies, in throughput-cost
// order, when it stays within L and within p.maxConfigs.
func rescueResidual(cands []Candidate, planned []group, residual, L float64, p genParams) []moduleResult {
	m := withDummies(p.model)
	rank := map[Candidate]int{}
	for i, c := range cands {
		rank[c] = i
	}
	var out []moduleResult
	for _, c := range cands {
		need, capacity := m.Need(c, L), p.util*c.Throughput
		if !(need >= residual) || need > capacity || math.IsInf(need, 0) {
			continue
		}
		used := map[Candidate]bool{c: true}
		for _, g := range planned {
			used[g.c] = true
		}
		if p.maxConfigs > 0 && len(used) > p.maxConfigs {
			continue
		}
		groups := append(append([]group(nil), planned...), group{c: c, machines: need / capacity, rate: need})
		slices.SortStableFunc(groups, func(a, b group) int { return rank[a.c] - rank[b.c] })
		r := finish(groups, need-residual, p.model)
		if r.wcl <= L+latencyEps {
			out = append(out, r)
		}
	}
	return out
}

// bestSingleGroup is Algorithm 1 and the dummy generator in closed form for the
// grouped reading of Theorem 1, where one group carries the module's whole stream:
// the cheapest config c whose WCL at the stream rate fits L, the stream being T, or,
// with dummies, Need(c, L) when that is more (§III-D: a config whose batches
// collect too slowly at T becomes feasible once dummies raise the stream). Ties go
// to no dummy, then to throughput-cost order. It is also the exhaustive optimum of
// that form: a later group's stream is a subset of the first's, so moving its load
// to the first group never raises WCL or cost.
func bestSingleGroup(cands []Candidate, T, L float64, p genParams, dummy bool) (moduleResult, bool) {
	var best moduleResult
	found := false
	for _, c := range cands {
		minRate := 0.0
		if p.maxBurst > 0 {
			// One group's burst is b/rate: a big batch at a low rate holds its
			// children's items back; dummies can speed it up too.
			minRate = float64(c.Batch) / p.maxBurst
		}
		rate, ok := groupRate(c, T, L, minRate, p.model, dummy)
		if !ok {
			continue
		}
		cost := c.Price * rate / (p.util * c.Throughput)
		if found && cost >= best.cost-1e-12 {
			continue
		}
		best, found = finish([]group{{c: c, machines: rate / (p.util * c.Throughput), rate: rate}}, rate-T, p.model), true
	}
	return best, found
}
