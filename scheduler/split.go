package scheduler

import (
	"fmt"
	"math"
	"strings"
)

// splitKind names a latency-splitting strategy.
type splitKind string

const (
	// splitLC is Algorithm 2: the move with the highest latency-cost efficiency.
	splitLC splitKind = "lc"
	// splitThroughput picks the move to the highest throughput-cost ratio
	// (Scrooge's throughput-based split; Picc-tb).
	splitThroughput splitKind = "throughput"
	// splitCost picks the move that saves the most cost (InferLine's greedy).
	splitCost splitKind = "cost"
	// splitEven gives every module on a path an equal share (Clipper).
	splitEven splitKind = "even"
	// splitQuantized searches budgets in multiples of a quantum (Nexus; Picc-q).
	splitQuantized splitKind = "quantized"
)

// moduleInput is what the splitter knows of one module.
type moduleInput struct {
	name  string
	rate  float64 // req/s
	cands []Candidate
}

// point is one module running one config alone at its whole rate: the view
// Algorithm 2 works on (GetWCL with w = T_M, cost = p·T_M/t).
// For a module with children, burst is what it adds to their paths (burstOf of
// one group: b/T) and wcl includes it.
type point struct {
	wcl, cost, burst float64
	c                Candidate
}

func points(m moduleInput, model LatencyModel, util float64, hasChildren bool) []point {
	ps := make([]point, len(m.cands))
	for i, c := range m.cands {
		if m.rate <= rateEps {
			ps[i] = point{c: c}
			continue
		}
		ps[i] = point{wcl: model.WCL(c, m.rate), cost: c.Price * m.rate / (util * c.Throughput), c: c}
		if hasChildren {
			ps[i].burst = float64(c.Batch) / m.rate
			ps[i].wcl += ps[i].burst
		}
	}
	return ps
}

// ErrInfeasible is wrapped by every error that says a session cannot meet its SLO.
var ErrInfeasible = fmt.Errorf("infeasible")

// fastest returns each module's minimum WCL at its rate, and the session's fastest
// latency (the longest path of those).
func fastest(g *graph, mods []moduleInput, model LatencyModel, util float64) ([]float64, float64) {
	w := make([]float64, len(mods))
	for i, m := range mods {
		w[i] = math.Inf(1)
		for _, p := range points(m, model, util, len(g.children[i]) > 0) {
			w[i] = math.Min(w[i], p.wcl)
		}
	}
	total, _ := g.longest(w)
	return w, total
}

func infeasibleError(session string, g *graph, w []float64, total, slo float64) error {
	return fmt.Errorf("session %q: %w: the fastest latency it can reach is %s (path %s), above its SLO %s",
		session, ErrInfeasible, fmtSeconds(total), strings.Join(g.criticalPath(w), " -> "), fmtSeconds(slo))
}

// SplitLatency is Algorithm 2 on any DAG, with the scoring of kind: start from the
// minimum-WCL config of every module, repeatedly apply the config change with the
// highest score whose longest path still fits the SLO, then scale each budget
// linearly to its WCL over the longest path through the module (line 19). Budgets
// are in seconds, by module index.
//
// A module with children also passes them a burst (burstOf); the split counts it
// on every path and returns, beside each module's WCL budget, the burst allowance
// the module may pass on (0 for modules without children).
func splitLatency(g *graph, mods []moduleInput, slo float64, model LatencyModel, util float64, kind splitKind) ([]float64, []float64) {
	n := len(mods)
	pts := make([][]point, n)
	cur := make([]int, n)
	w := make([]float64, n)
	for i, m := range mods {
		pts[i] = points(m, model, util, len(g.children[i]) > 0)
		for k, p := range pts[i] {
			b := pts[i][cur[i]]
			if p.wcl < b.wcl || (p.wcl == b.wcl && p.cost < b.cost) {
				cur[i] = k
			}
		}
		w[i] = pts[i][cur[i]].wcl
	}
	if kind == splitEven {
		return evenSplit(g, slo), make([]float64, n)
	}
	for {
		// Changing one module's WCL changes only the paths through it, so a move is
		// feasible iff the longest path through the module still fits.
		_, through := g.longest(w)
		bestM, bestK := -1, -1
		var bestScore, bestSave, bestDL float64
		for i := range mods {
			prev := pts[i][cur[i]]
			for k, p := range pts[i] {
				save := prev.cost - p.cost
				if k == cur[i] || save <= 1e-12 {
					continue
				}
				dl := p.wcl - prev.wcl
				var score float64
				switch kind {
				case splitThroughput:
					score = p.c.Ratio()
				case splitCost:
					score = save
				default: // splitLC, line 11
					if dl <= 0 {
						score = math.Inf(1)
					} else {
						score = save / dl
					}
				}
				if bestM >= 0 && (score < bestScore || (score == bestScore && (save < bestSave || (save == bestSave && dl >= bestDL)))) {
					continue
				}
				// Line 13, checking the candidate move (the published line checks
				// the previous best, which would accept infeasible moves).
				if through[i]-w[i]+p.wcl > slo+latencyEps {
					continue
				}
				bestM, bestK, bestScore, bestSave, bestDL = i, k, score, save, dl
			}
		}
		if bestM < 0 {
			break
		}
		cur[bestM] = bestK
		w[bestM] = pts[bestM][bestK].wcl
	}
	shares := scaleBudgets(g, w, slo)
	allow := make([]float64, n)
	for i := range shares {
		p := pts[i][cur[i]]
		if p.wcl > 0 {
			allow[i] = shares[i] * p.burst / p.wcl
			shares[i] -= allow[i]
		}
	}
	return shares, allow
}

// scaleBudgets is Algorithm 2 line 19: L_M = WCL_M / (longest path through M) × L,
// so every path's budgets add up to at most the SLO.
func scaleBudgets(g *graph, w []float64, slo float64) []float64 {
	_, through := g.longest(w)
	out := make([]float64, len(w))
	for i := range w {
		if through[i] > 0 {
			// Never below the WCL: a path may exceed the SLO by rounding.
			out[i] = w[i] * math.Max(1, slo/through[i])
		}
	}
	return out
}

// evenSplit gives each module SLO / (modules on the longest path through it, by
// count): Clipper's even split generalised to DAGs.
func evenSplit(g *graph, slo float64) []float64 {
	ones := make([]float64, len(g.names))
	for i := range ones {
		ones[i] = 1
	}
	_, through := g.longest(ones)
	out := make([]float64, len(ones))
	for i := range out {
		out[i] = slo / through[i]
	}
	return out
}
