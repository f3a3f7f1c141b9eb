package planner

import (
	"math"
)

// group is one config group of a module: machines running config c that share one
// batch stream and carry rate req/s (dummies included).
type group struct {
	c        Candidate
	machines float64
	rate     float64
}

// moduleResult is a module's config set for one (rate, budget).
type moduleResult struct {
	groups []group
	dummy  float64 // dummy rate, req/s (§III-D)
	cost   float64 // Σ machines × price
	wcl    float64 // seconds: max over groups
	// burst is the longest gap, in seconds, between two batch completions of the
	// module: its children receive their items in bursts that far apart (see
	// burstOf).
	burst float64
}

// genParams selects the form of Algorithm 1.
type genParams struct {
	model LatencyModel
	// grouped: the machines of one config are one group sharing one batch stream
	// (Theorem 1 read literally; policy piccolo). Otherwise the paper's Algorithm 1:
	// ⌊n⌋ full machines, then the residual is planned anew at its own rate.
	grouped bool
	// maxConfigs bounds the distinct configs per module (0 = any; Picc-1bpc/2bpc).
	maxConfigs int
	// util is the maximum utilisation of a machine (headroom); 1 = none.
	util float64
	// maxBurst, when > 0, bounds the burst (burstOf, seconds) a module may pass
	// to its children; set per call for modules that have children. Only the
	// grouped form reads it.
	maxBurst float64
}

const (
	rateEps    = 1e-9 // req/s below which a residual counts as served
	latencyEps = 1e-9 // seconds of tolerance on a budget comparison
)

// generateConfigs is Algorithm 1 (GenerateConfigs): it returns the config set for a module of rate T
// req/s under a latency budget of L seconds, with candidates in throughput-cost
// order. When no config can serve the residual it reports false, the residual
// rate it failed on and, in the result's groups, the groups planned before it
// (cost and WCL unset; used by the dummy generator's rescue).
func generateConfigs(cands []Candidate, T, L float64, p genParams) (moduleResult, float64, bool) {
	if T <= rateEps {
		return moduleResult{}, 0, true
	}
	if p.grouped {
		r, ok := bestSingleGroup(cands, T, L, p, false)
		return r, T, ok
	}
	var groups []group
	used := map[Candidate]bool{}
	rw := T
	for k := 0; rw > rateEps; {
		if k >= len(cands) {
			return moduleResult{groups: groups}, rw, false
		}
		c := cands[k]
		if p.model.WCL(c, rw) > L+latencyEps {
			k++
			continue
		}
		if p.maxConfigs > 0 && !used[c] && len(used) >= p.maxConfigs {
			return moduleResult{groups: groups}, rw, false
		}
		last := p.maxConfigs > 0 && !used[c] && len(used) == p.maxConfigs-1
		used[c] = true
		capacity := p.util * c.Throughput
		n := rw / capacity
		if n >= 1-1e-12 && !last {
			full := math.Floor(n + 1e-9)
			groups = append(groups, group{c: c, machines: full, rate: full * capacity})
			rw -= full * capacity
			if rw < rateEps*math.Max(1, T) {
				rw = 0
			}
			continue
		}
		groups = append(groups, group{c: c, machines: n, rate: rw})
		rw = 0
	}
	return finish(groups, 0, p.model), 0, true
}

// finish fills in the cost and WCL of a config set (Theorem 1: a group's stream
// rate is its own rate plus that of every group after it).
func finish(groups []group, dummy float64, m LatencyModel) moduleResult {
	if dummy > 0 {
		m = withDummies(m)
	}
	r := moduleResult{groups: groups, dummy: dummy}
	w := 0.0
	for i := len(groups) - 1; i >= 0; i-- {
		w += groups[i].rate
		r.cost += groups[i].machines * groups[i].c.Price
		r.wcl = math.Max(r.wcl, m.WCL(groups[i].c, w))
	}
	r.burst = burstOf(groups)
	return r
}

// burstOf bounds the gap between two consecutive batch completions of a module:
// one batch's collection from the module's whole stream, b/W, plus the spread of
// the groups' durations, since a batch of a faster group sent later can finish
// first. A child module receives its items in bursts at most this far apart, so
// its oldest item can wait this much longer than its own (b−1)/w (found by the
// simulator; docs/planner.md). For a module planned for its tail's slow
// batches (withTail) the spread runs from the shortest profiled duration to
// the longest slow one.
func burstOf(groups []group) float64 {
	W, bMax := 0.0, 0
	dMin, dMax := math.Inf(1), 0.0
	for _, g := range groups {
		W += g.rate
		bMax = max(bMax, g.c.Batch)
		dMin, dMax = math.Min(dMin, g.c.profiledDuration()), math.Max(dMax, g.c.Duration)
	}
	return burst(W, bMax, dMin, dMax)
}

// burst is the bound burstOf and Burst compute from a module's groups: their
// summed rate W (req/s), largest batch bMax and shortest and longest batch
// durations (s): bMax/W + dMax − dMin; 0 when W is not positive.
func burst(W float64, bMax int, dMin, dMax float64) float64 {
	if W <= 0 {
		return 0
	}
	return float64(bMax)/W + dMax - dMin
}

// streamRates returns, for each group, w_i: its rate plus the rates after it.
func streamRates(groups []group) []float64 {
	w := make([]float64, len(groups))
	sum := 0.0
	for i := len(groups) - 1; i >= 0; i-- {
		sum += groups[i].rate
		w[i] = sum
	}
	return w
}
