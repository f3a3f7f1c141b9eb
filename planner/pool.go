package planner

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/piccolo-serving/piccolo/api"
)

// Pool-aware planning (docs/calibration.md, "Pool-aware planning"). The
// paper plans per hardware type at its price, as if every type had as many
// devices as the plan wants. With Options.Pool the planner also knows how
// many devices each type has: a module whose chosen type is short keeps the
// whole machines of it that the pool can give and serves the rest of its rate
// with a second group on another type, each group within the module's WCL
// under Theorem 1 (the first group in throughput-cost order sees the whole
// stream), the session's bursts and SLO checked on every path.

// fitSteps bounds the splits fitToPool makes for one session.
const fitSteps = 8

// fitToPool returns results changed so that the session's groups need no
// more devices of a type than pol.pool allows (types it does not name are
// unbounded), as far as splitting one module's group at a time onto another
// type can: greedily, the split that leaves the fewest devices missing,
// then the cheapest, while it misses fewer than before; every split keeps
// the session within slo (pathLength, bursts included). results is not
// modified; it is returned itself when nothing is short or nothing helps.
func fitToPool(g *graph, mods []moduleInput, results []moduleResult, slo float64, pol policy) []moduleResult {
	miss := missingDevices(devicesNeeded(resultGroups(results)), pol.pool)
	if miss == 0 {
		return results
	}
	results = slices.Clone(results)
	for range fitSteps {
		if miss == 0 {
			break
		}
		need := devicesNeeded(resultGroups(results))
		bestI, bestMiss, bestCost := -1, miss, math.Inf(1)
		var bestR moduleResult
		for _, hw := range slices.Sorted(maps.Keys(need)) {
			have, bounded := pol.pool[hw]
			if !bounded || need[hw] <= have {
				continue
			}
			for i, m := range mods {
				for _, r := range splitsOff(m, results[i], hw, need[hw]-have, pol) {
					old := results[i]
					results[i] = r
					fits := pathLength(g, results) <= slo+latencyEps
					mm := missingDevices(devicesNeeded(resultGroups(results)), pol.pool)
					cost := 0.0
					for _, x := range results {
						cost += x.cost
					}
					results[i] = old
					if fits && (mm < bestMiss || mm == bestMiss && bestI >= 0 && cost < bestCost-1e-9) {
						bestI, bestMiss, bestCost, bestR = i, mm, cost, r
					}
				}
			}
		}
		if bestI < 0 {
			break
		}
		results[bestI], miss = bestR, bestMiss
	}
	return results
}

// splitsOff returns the config sets that move part of module m's groups on
// hardware hw (at least excess machines' worth where the group has them) to
// one new group on another type: for each group on hw, keeping k whole
// machines on hw (from its whole machines down to two fewer than its
// machines less excess, and none), of its own config or of another of the module's configs
// on hw, and the rest of its rate on each candidate of another type, the
// groups in throughput-cost order. Sets no config can serve (an infinite
// WCL) are left out.
func splitsOff(m moduleInput, r moduleResult, hw string, excess int, pol policy) []moduleResult {
	var out []moduleResult
	for gi, gr := range r.groups {
		if gr.c.Hardware != hw {
			continue
		}
		top := math.Floor(gr.machines + 1e-9)
		low := math.Max(0, math.Floor(gr.machines-float64(excess)+1e-9)-2)
		for _, keep := range m.cands {
			if keep.Hardware != hw {
				continue
			}
			for k := top; k >= 0; k-- {
				if k < low && k > 0 {
					continue
				}
				kept := k * pol.gen.util * keep.Throughput
				rest := gr.rate - kept
				if rest <= rateEps {
					continue
				}
				for _, c := range m.cands {
					if c.Hardware == hw {
						continue
					}
					groups := make([]group, 0, len(r.groups)+1)
					groups = append(groups, r.groups[:gi]...)
					if k > 0 {
						groups = append(groups, group{c: keep, machines: k, rate: kept})
					}
					groups = append(groups, r.groups[gi+1:]...)
					groups = append(groups, group{c: c, machines: rest / (pol.gen.util * c.Throughput), rate: rest})
					slices.SortStableFunc(groups, func(a, b group) int { return cmp.Compare(b.c.Ratio(), a.c.Ratio()) })
					s := finish(groups, r.dummy, pol.model)
					if !math.IsInf(s.wcl, 0) && !math.IsNaN(s.wcl) {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// resultGroups yields the (hardware, machines) of every group of results.
func resultGroups(results []moduleResult) func(yield func(string, float64) bool) {
	return func(yield func(string, float64) bool) {
		for _, r := range results {
			for _, gr := range r.groups {
				if !yield(gr.c.Hardware, gr.machines) {
					return
				}
			}
		}
	}
}

// planGroupsOf yields the (hardware, machines) of every group of sp.
func planGroupsOf(sp *api.SessionPlan) func(yield func(string, float64) bool) {
	return func(yield func(string, float64) bool) {
		for _, mp := range sp.Modules {
			for _, gr := range mp.Configs {
				if !yield(gr.Hardware, gr.Machines) {
					return
				}
			}
		}
	}
}

// devicesNeeded returns, per hardware type, the devices the groups need:
// each group's whole machines a device each, and its partial machine packed
// with the others of the type first fit decreasing (as placement packs
// fractional machines on shared devices).
func devicesNeeded(groups func(yield func(string, float64) bool)) map[string]int {
	need := map[string]int{}
	parts := map[string][]float64{}
	for hw, n := range groups {
		full := math.Floor(n + 1e-9)
		need[hw] += int(full)
		if f := n - full; f > 1e-9 {
			parts[hw] = append(parts[hw], f)
		}
	}
	for hw, fs := range parts {
		slices.SortFunc(fs, func(a, b float64) int { return cmp.Compare(b, a) })
		var bins []float64
		for _, f := range fs {
			placed := false
			for j := range bins {
				if bins[j]+f <= 1+1e-9 {
					bins[j] += f
					placed = true
					break
				}
			}
			if !placed {
				bins = append(bins, f)
			}
		}
		need[hw] += len(bins)
	}
	return need
}

// missingDevices is Σ max(0, need − pool) over the types pool names.
func missingDevices(need, pool map[string]int) int {
	n := 0
	for hw, k := range need {
		if have, ok := pool[hw]; ok {
			n += max(0, k-have)
		}
	}
	return n
}

// lessPool returns pool less the devices sp's groups need (at least 0 each):
// what the sessions after sp may use.
func lessPool(pool map[string]int, sp *api.SessionPlan) map[string]int {
	out := maps.Clone(pool)
	for hw, k := range devicesNeeded(planGroupsOf(sp)) {
		if have, ok := out[hw]; ok {
			out[hw] = max(0, have-k)
		}
	}
	return out
}
