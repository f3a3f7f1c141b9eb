package planner

import (
	"fmt"
	"math"
	"strings"

	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Split is a latency split (§III-C): how a session's SLO is divided into
// module budgets. The splits Algorithm 2's greedy loop runs differ only in how
// they rank a move (Score); a Split is an immutable value chosen by name from
// a registry (PolicySpec.Split, Options.Split, --split): BuiltinSplits holds
// the built-in ones, and Options.Strategies.Splits may offer more.
//
// The loop starts every module at its fastest config and, while some move to
// a cheaper config keeps every path within the SLO, applies the move of the
// highest Score (ties: more saved, then less latency added); then budgets
// are scaled to the SLO (line 19). The built-in splits even, quantized and
// the optimum's search replace the loop: they implement unexported hooks.
type Split interface {
	// Name is the name users choose the split by, e.g. "lc".
	Name() string
	// Score ranks moving a module to config c, which saves save cost units
	// (> 0) and adds dl seconds of latency (WCL at the module's rate,
	// bursts included; may be ≤ 0) on every path through the module. The
	// highest score moves first.
	Score(c Candidate, save, dl float64) float64
}

// The built-in splits (BuiltinSplits).
var (
	// SplitLC is Algorithm 2: the move with the highest latency-cost
	// efficiency save/dl (line 11); a move that adds no latency first.
	SplitLC Split = lcSplit{}
	// SplitThroughput picks the move to the highest throughput-cost ratio
	// (Scrooge's throughput-based split; Picc-tb).
	SplitThroughput Split = throughputSplit{}
	// SplitCost picks the move that saves the most cost (InferLine's greedy).
	SplitCost Split = costSplit{}
	// SplitEven gives every module on a path an equal share (Clipper).
	SplitEven Split = evenSplitter{}
	// SplitQuantized searches budgets in multiples of a quantum (Nexus;
	// Picc-q; PolicySpec.Quantum, Options.Quantum).
	SplitQuantized Split = quantizedSplit{}
)

// BuiltinSplits returns a registry of the built-in splits.
func BuiltinSplits() *registry.Registry[Split] {
	return registry.Must(registry.New("split", "splits", SplitLC, SplitThroughput, SplitCost, SplitEven, SplitQuantized))
}

// defaultSplits is the registry used when Options.Strategies.Splits is nil.
var defaultSplits = BuiltinSplits()

type lcSplit struct{}

func (lcSplit) Name() string                                { return "lc" }
func (lcSplit) Score(_ Candidate, save, dl float64) float64 { return lcScore(save, dl) }

// lcScore is Algorithm 2's latency-cost efficiency (line 11).
func lcScore(save, dl float64) float64 {
	if dl <= 0 {
		return math.Inf(1)
	}
	return save / dl
}

type throughputSplit struct{}

func (throughputSplit) Name() string                            { return "throughput" }
func (throughputSplit) Score(c Candidate, _, _ float64) float64 { return c.Ratio() }

type costSplit struct{}

func (costSplit) Name() string                               { return "cost" }
func (costSplit) Score(_ Candidate, save, _ float64) float64 { return save }

// Built-in greedy splits, by number, for splitLatency's loop (builtinScore).
const (
	scoreOther = iota // any other Split: its Score, through the interface
	scoreLC
	scoreThroughput
	scoreCost
)

// builtinScore returns which built-in greedy split s is, or scoreOther.
// Algorithm 2's loop is the planner's hottest: it computes the built-in
// splits' scores in line (an interface call per move cost
// BenchmarkPlan100Modules about 20%), and calls any other Split's Score.
func builtinScore(s Split) int {
	switch s.(type) {
	case lcSplit:
		return scoreLC
	case throughputSplit:
		return scoreThroughput
	case costSplit:
		return scoreCost
	}
	return scoreOther
}

// budgeter is a Split that sets the budgets itself instead of Algorithm 2's
// loop (even): budgets by module index, seconds, and no burst allowance.
type budgeter interface {
	budgets(g *graph, slo float64) []float64
}

type evenSplitter struct{}

func (evenSplitter) Name() string                              { return "even" }
func (evenSplitter) Score(Candidate, float64, float64) float64 { return 0 } // not called: a budgeter
func (evenSplitter) budgets(g *graph, slo float64) []float64   { return evenSplit(g, slo) }

// modulePlanner is a Split that plans the modules itself (a search over
// budgets) instead of splitting and then planning each module
// (planModules).
type modulePlanner interface {
	planModules(g *graph, mods []moduleInput, slo float64, pol policy) ([]moduleResult, error)
}

type quantizedSplit struct{}

func (quantizedSplit) Name() string                              { return "quantized" }
func (quantizedSplit) Score(Candidate, float64, float64) float64 { return 0 } // not called: a modulePlanner
func (quantizedSplit) planModules(g *graph, mods []moduleInput, slo float64, pol policy) ([]moduleResult, error) {
	return searchSplit(g, mods, slo, pol, quantizedOptions)
}

// optimalSplit is policy optimal's: the exhaustive search under the
// reference policy's latency model and config-set form. Not in
// BuiltinSplits: resolve sets it for a policy with PolicySpec.Optimal.
type optimalSplit struct{}

func (optimalSplit) Name() string                              { return "optimal" }
func (optimalSplit) Score(Candidate, float64, float64) float64 { return 0 } // not called: a modulePlanner
func (optimalSplit) planModules(g *graph, mods []moduleInput, slo float64, pol policy) ([]moduleResult, error) {
	// The search's budgets are on a grid; reassignment gives out the slack
	// the grid leaves (a dummy rate is continuous), never raising the cost.
	results, err := searchSplit(g, mods, slo, pol, optimalOptions)
	if err == nil {
		reassign(g, mods, results, slo, pol)
	}
	return results, err
}

// moduleInput is what the splitter knows of one module.
type moduleInput struct {
	name  string
	rate  float64 // req/s
	cands []Candidate
}

// point is one module running one config alone at its whole rate: the view
// Algorithm 2 works on (GetWCL with w = T_M, cost = p·T_M/t).
// For a module with children, burst is what it adds to their paths (burstOf of
// one group: b/T, plus a tail's spread) and wcl includes it.
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
			if c.profiled > 0 { // a tail planned for (withTail): its spread, as burstOf
				ps[i].burst += c.Duration - c.profiled
			}
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

// splitLatency is Algorithm 2 on any DAG, with the scoring of split: start from the
// minimum-WCL config of every module, repeatedly apply the config change with the
// highest score whose longest path still fits the SLO, then scale each budget
// linearly to its WCL over the longest path through the module (line 19). Budgets
// are in seconds, by module index.
//
// A module with children also passes them a burst (burstOf); the split counts it
// on every path and returns, beside each module's WCL budget, the burst allowance
// the module may pass on (0 for modules without children).
func splitLatency(g *graph, mods []moduleInput, slo float64, model LatencyModel, util float64, split Split) ([]float64, []float64) {
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
	if b, ok := split.(budgeter); ok {
		return b.budgets(g, slo), make([]float64, n)
	}
	how := builtinScore(split)
	for {
		// Changing one module's WCL changes only the paths through it, so a move is
		// feasible iff the longest path through the module still fits.
		_, through := g.longest(w)
		bestM, bestK := -1, -1
		var bestScore, bestSave, bestDL float64
		for i := range mods {
			prev := &pts[i][cur[i]]
			for k := range pts[i] {
				p := &pts[i][k]
				save := prev.cost - p.cost
				if k == cur[i] || save <= 1e-12 {
					continue
				}
				// Line 13, checking the candidate move (the published line checks
				// the previous best, which would accept infeasible moves). Checked
				// before the score, which is a call: most moves do not fit.
				if through[i]-w[i]+p.wcl > slo+latencyEps {
					continue
				}
				dl := p.wcl - prev.wcl
				var score float64
				switch how {
				case scoreLC:
					score = lcScore(save, dl)
				case scoreThroughput:
					score = p.c.Ratio()
				case scoreCost:
					score = save
				default:
					score = split.Score(p.c, save, dl)
				}
				if bestM >= 0 && (score < bestScore || (score == bestScore && (save < bestSave || (save == bestSave && dl >= bestDL)))) {
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
