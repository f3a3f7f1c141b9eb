package simulate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// TraceSearches names the searches PlanForTrace can make for a trace's plan:
// "ladder" (Piccolo's planner at rates from the trace's mean to its peak) and
// "inferline" (InferLine's planner, PlanInferLine).
var TraceSearches = []string{"ladder", "inferline"}

// CheckTraceSearch errs, naming the allowed searches, unless search is one of
// TraceSearches.
func CheckTraceSearch(search string) error {
	if !slices.Contains(TraceSearches, search) {
		return fmt.Errorf("trace search %q: allowed: %s", search, strings.Join(TraceSearches, ", "))
	}
	return nil
}

// InferLineStats says how PlanInferLine's search went.
type InferLineStats struct {
	Simulations int      // plans simulated on the trace (the Estimator's runs)
	Moves       []string // the moves taken, in order ("det: batch 1→2", ...)
}

// PlanInferLine plans the session a trace drives as InferLine's planner does
// (InferLine §4.3): every module gets one configuration — hardware, batch size
// and a whole number of replicas, each replica one instance (concurrency 1)
// taking up to a batch from the module's queue whenever it is free — and
// every candidate configuration is checked by simulating the trace on
// Piccolo's dispatcher (the Estimator, §4.2), feasible when the simulated
// session meets target (the share of its requests within the SLO) on the
// trace and on each of 8 block-bootstrap resamples of it (heldOut: a margin
// for traffic the trace does not hold, where the paper has none).
//
// Algorithm 1 (Initialize): batch 1 on each model's lowest-latency hardware,
// one replica; infeasible when the longest path's service time reaches the
// SLO; then a replica is added to the throughput bottleneck (the module whose
// replicas carry the smallest multiple of its rate) until the plan is feasible.
// Algorithm 2 (MinimizeCost): repeatedly, over every module, the moves
// IncreaseBatch (the next profiled batch size), RemoveReplica and DowngradeHW
// (the next cheaper hardware, re-initialised and locally minimised for that
// module alone, taken only when it lowers the cost); the feasible move of
// least cost is taken (an IncreaseBatch costs nothing more, so it is taken
// when nothing cheaper is feasible), until no move is feasible.
//
// Two shortcuts change no outcome: a candidate whose replicas cannot carry
// its module's mean rate is infeasible without a simulation, and a candidate
// already simulated is not simulated again. load is as for PlanForTrace
// (Trace required); modules are planned at their configured rates scaled to
// the trace's mean rate. A module with variants is planned with its first.
// The plan has the traced session only, latency model "tc-exact", and module
// budgets that split the SLO in proportion to each module's WCL on its
// longest path. Errors: no trace, an unknown session, a model with no
// profile at concurrency 1, an SLO below the service time, or no feasible
// plan within the replica limit (maxReplicas per module).
func PlanInferLine(cfg *api.Config, target float64, load Options) (PlanRun, InferLineStats, error) {
	il, err := newInferLine(cfg, target, load)
	if err != nil {
		return PlanRun{}, InferLineStats{}, err
	}
	st, err := il.initialize()
	if err != nil {
		return PlanRun{}, il.stats, err
	}
	st = il.minimizeCost(st, nil)
	return il.result(st), il.stats, nil
}

// PlanCoarse plans the traced session as whole-pipeline replicas (the
// coarse-grained baseline InferLine compares with, §7): every module on its
// lowest-latency hardware at batch 1, the same number of replicas for every
// module, the fewest that meet target as PlanInferLine checks it (margin included).
func PlanCoarse(cfg *api.Config, target float64, load Options) (PlanRun, InferLineStats, error) {
	il, err := newInferLine(cfg, target, load)
	if err != nil {
		return PlanRun{}, InferLineStats{}, err
	}
	st := il.fastest()
	for k := 1; k <= maxReplicas; k++ {
		for i := range st {
			st[i].replicas = k
		}
		if il.feasible(st) {
			return il.result(st), il.stats, nil
		}
	}
	return PlanRun{}, il.stats, fmt.Errorf("coarse-grained: no number of pipeline replicas up to %d meets the SLO for %.2f%% of session %q's requests", maxReplicas, 100*target, il.session.Name)
}

// maxReplicas bounds the replicas of one module in PlanInferLine and
// PlanCoarse: a plan needing more is reported as infeasible.
const maxReplicas = 256

// ilChoice is one module's configuration in InferLine's search.
type ilChoice struct {
	hw       int // index into the module's options
	batch    int // index into that option's entries
	replicas int
}

// ilOption is one hardware type a module's model can run on: its profiled
// entries at concurrency 1, by batch size.
type ilOption struct {
	hw      api.Hardware
	entries []api.ProfileEntry
}

type ilModule struct {
	mod     api.Module
	model   string
	rate    float64    // req/s at the trace's mean rate
	options []ilOption // by price, cheapest first
	fastest int        // the option of least batch-1 duration
}

type inferLine struct {
	session api.Session
	slo     time.Duration
	mods    []ilModule
	target  float64
	load    Options
	mean    float64
	seen    map[string]bool // feasibility of simulated states
	held    *heldOut        // the margin for traffic not in the trace
	stats   InferLineStats
}

func newInferLine(cfg *api.Config, target float64, load Options) (*inferLine, error) {
	si, _, mean, err := traceLoad(cfg, target, &load, "InferLine planner")
	if err != nil {
		return nil, err
	}
	scaled := withSessionRate(cfg, si, mean)
	s := scaled.Sessions[si]
	il := &inferLine{session: s, slo: time.Duration(s.SLO), target: target, load: load, mean: mean, seen: map[string]bool{}, held: newHeldOut(load)}
	for _, m := range s.Modules {
		model := m.Model
		if model == "" && len(m.Variants) > 0 {
			model = m.Variants[0].Model
		}
		im := ilModule{mod: m, model: model, rate: m.Rate}
		for _, p := range cfg.ProfilesOf(model) {
			hw, ok := cfg.HardwareByName(p.Hardware)
			if !ok {
				continue
			}
			var es []api.ProfileEntry
			for _, e := range p.Entries {
				if e.Concurrency <= 1 && e.Batch > 0 && e.Duration > 0 {
					es = append(es, e)
				}
			}
			if len(es) == 0 {
				continue
			}
			slices.SortFunc(es, func(a, b api.ProfileEntry) int { return a.Batch - b.Batch })
			im.options = append(im.options, ilOption{hw: hw, entries: es})
		}
		if len(im.options) == 0 {
			return nil, fmt.Errorf("session %q module %q: model %q has no profile at concurrency 1 on a configured hardware type", s.Name, m.Name, model)
		}
		slices.SortStableFunc(im.options, func(a, b ilOption) int { return cmpFloat(a.hw.Price, b.hw.Price) })
		for j, o := range im.options {
			if o.entries[0].Duration < im.options[im.fastest].entries[0].Duration {
				im.fastest = j
			}
		}
		il.mods = append(il.mods, im)
	}
	if _, err := (&api.SessionPlan{Modules: il.modulePlans(il.fastest())}).ShortestRest(); err != nil {
		return nil, err // a cycle (the config loader rejects them)
	}
	return il, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fastest is Algorithm 1's first state: batch 1 (the smallest profiled) on
// each model's lowest-latency hardware, one replica.
func (il *inferLine) fastest() []ilChoice {
	st := make([]ilChoice, len(il.mods))
	for i, m := range il.mods {
		st[i] = ilChoice{hw: m.fastest, replicas: 1}
	}
	return st
}

// initialize is Algorithm 1.
func (il *inferLine) initialize() ([]ilChoice, error) {
	st := il.fastest()
	if svc := il.serviceTime(st); svc >= il.slo {
		return nil, fmt.Errorf("InferLine planner: session %q: service time %v on the fastest hardware at batch 1 reaches the SLO %v", il.session.Name, svc, il.slo)
	}
	for !il.feasible(st) {
		i := il.bottleneck(st, -1)
		if st[i].replicas >= maxReplicas {
			return nil, fmt.Errorf("InferLine planner: session %q: no plan with up to %d replicas of module %q meets the SLO for %.2f%% of the trace's requests", il.session.Name, maxReplicas, il.mods[i].mod.Name, 100*il.target)
		}
		st[i].replicas++
	}
	return st, nil
}

// bottleneck is the module (only among only, when ≥ 0) whose replicas carry
// the smallest multiple of its rate.
func (il *inferLine) bottleneck(st []ilChoice, only int) int {
	best, bestRatio := 0, math.Inf(1)
	for i := range st {
		if only >= 0 && i != only {
			continue
		}
		r := il.capacity(i, st[i]) / il.mods[i].rate
		if r < bestRatio {
			best, bestRatio = i, r
		}
	}
	return best
}

// capacity is module i's throughput under c, req/s.
func (il *inferLine) capacity(i int, c ilChoice) float64 {
	return float64(c.replicas) * il.entry(i, c).Throughput()
}

func (il *inferLine) entry(i int, c ilChoice) api.ProfileEntry {
	return il.mods[i].options[c.hw].entries[c.batch]
}

// minimizeCost is Algorithm 2 from st; with only non-nil, the localized
// version DowngradeHW runs: only module *only moves, and hardware is not
// downgraded again.
func (il *inferLine) minimizeCost(st []ilChoice, only *int) []ilChoice {
	for {
		type cand struct {
			st   []ilChoice
			cost float64
			move string
		}
		var cands []cand
		add := func(next []ilChoice, move string) {
			cands = append(cands, cand{next, il.cost(next), move})
		}
		for i := range il.mods {
			if only != nil && i != *only {
				continue
			}
			c, name := st[i], il.mods[i].mod.Name
			if c.batch+1 < len(il.mods[i].options[c.hw].entries) { // IncreaseBatch
				next := slices.Clone(st)
				next[i].batch++
				add(next, fmt.Sprintf("%s: batch %d→%d", name, il.entry(i, c).Batch, il.entry(i, next[i]).Batch))
			}
			if c.replicas > 1 { // RemoveReplica
				next := slices.Clone(st)
				next[i].replicas--
				add(next, fmt.Sprintf("%s: replicas %d→%d", name, c.replicas, next[i].replicas))
			}
			if only == nil && c.hw > 0 { // DowngradeHW
				if next, ok := il.downgrade(st, i); ok {
					add(next, fmt.Sprintf("%s: hardware %s→%s (b%d ×%d)", name, il.mods[i].options[c.hw].hw.Name,
						il.mods[i].options[next[i].hw].hw.Name, il.entry(i, next[i]).Batch, next[i].replicas))
				}
			}
		}
		// The feasible candidate of least cost, the first of equal ones in
		// Algorithm 2's order (a stable sort keeps it).
		slices.SortStableFunc(cands, func(a, b cand) int { return cmpFloat(a.cost, b.cost) })
		cur := il.cost(st)
		var best *cand
		for k := range cands {
			if cands[k].cost > cur+1e-12 {
				break // Algorithm 2 never takes a dearer plan
			}
			if il.feasible(cands[k].st) {
				best = &cands[k]
				break
			}
		}
		if best == nil {
			return st
		}
		if only == nil {
			il.stats.Moves = append(il.stats.Moves, best.move)
		}
		st = best.st
	}
}

// downgrade is the DowngradeHW move of module i: the next cheaper hardware,
// initialised for i alone (batch 1, replicas added until feasible, the other
// modules frozen) and then locally minimised; ok only when the result is
// feasible and cheaper than st.
func (il *inferLine) downgrade(st []ilChoice, i int) ([]ilChoice, bool) {
	next := slices.Clone(st)
	next[i] = ilChoice{hw: st[i].hw - 1, replicas: 1}
	if il.serviceTime(next) >= il.slo {
		return nil, false
	}
	for !il.feasible(next) {
		if next[i].replicas >= maxReplicas || il.cost(next) >= il.cost(st) {
			return nil, false // no cheaper feasible plan on this hardware
		}
		next[i].replicas++
	}
	next = il.minimizeCost(next, &i)
	return next, il.cost(next) < il.cost(st)-1e-12
}

// serviceTime is the longest path's sum of batch durations.
func (il *inferLine) serviceTime(st []ilChoice) time.Duration {
	by := map[string]time.Duration{}
	var path func(i int) time.Duration
	index := map[string]int{}
	for i, m := range il.mods {
		index[m.mod.Name] = i
	}
	path = func(i int) time.Duration {
		name := il.mods[i].mod.Name
		if d, ok := by[name]; ok {
			return d
		}
		var longest time.Duration
		for _, p := range il.mods[i].mod.After {
			if j, ok := index[p]; ok {
				longest = max(longest, path(j))
			}
		}
		d := longest + time.Duration(il.entry(i, st[i]).Duration)
		by[name] = d
		return d
	}
	var worst time.Duration
	for i := range il.mods {
		worst = max(worst, path(i))
	}
	return worst
}

func (il *inferLine) cost(st []ilChoice) float64 {
	c := 0.0
	for i, ch := range st {
		c += float64(ch.replicas) * il.mods[i].options[ch.hw].hw.Price
	}
	return c
}

// feasible simulates st on the trace (once per state) and says whether the
// session meets the target. A state whose replicas cannot carry a module's
// mean rate is infeasible without a simulation.
func (il *inferLine) feasible(st []ilChoice) bool {
	for i := range st {
		if il.capacity(i, st[i]) < il.mods[i].rate {
			return false
		}
	}
	key := stateKey(st)
	if ok, done := il.seen[key]; done {
		return ok
	}
	p := il.plan(st)
	rep, err := Run(p, il.load)
	ok := err == nil && meets(rep, il.target)
	if ok {
		ok, err = il.held.meets(p, il.target)
		ok = ok && err == nil
	}
	il.stats.Simulations++
	il.seen[key] = ok
	return ok
}

func stateKey(st []ilChoice) string {
	var b strings.Builder
	for _, c := range st {
		b.WriteString(strconv.Itoa(c.hw))
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(c.batch))
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(c.replicas))
		b.WriteByte(' ')
	}
	return b.String()
}

func (il *inferLine) result(st []ilChoice) PlanRun {
	p := il.plan(st)
	rep, err := Run(p, il.load)
	if err != nil {
		return PlanRun{RatePerSec: il.mean, Plan: p}
	}
	return run(p, rep, il.mean, il.session.Name)
}

// modulePlans are st's modules as plan modules: one group each, its WCL
// d + (b−1)/rate (the exact TC bound for one stream), and no budgets yet.
func (il *inferLine) modulePlans(st []ilChoice) []api.ModulePlan {
	out := make([]api.ModulePlan, len(il.mods))
	for i, m := range il.mods {
		e, hw := il.entry(i, st[i]), il.mods[i].options[st[i].hw].hw
		d := e.Duration.Seconds()
		wcl := d
		if e.Batch > 1 && m.rate > 0 {
			wcl += float64(e.Batch-1) / m.rate
		}
		n := float64(st[i].replicas)
		out[i] = api.ModulePlan{Name: m.mod.Name, Model: m.model, After: m.mod.After, FanOut: m.mod.FanOut, Rate: m.rate,
			WCLMs: 1000 * wcl, Cost: n * hw.Price,
			Configs: []api.GroupPlan{{Hardware: hw.Name, Price: hw.Price, Batch: e.Batch, Concurrency: 1,
				DurationMs: 1000 * d, Throughput: e.Throughput(), Machines: n, Rate: m.rate, WCLMs: 1000 * wcl, Cost: n * hw.Price}}}
	}
	return out
}

// plan is st as a plan of the traced session, the SLO split over each
// longest path in proportion to the modules' WCLs. A module's WCL is its
// group's plus its parents' largest burst (planner.Burst), as the planner's
// and planner.Verify's are, so that `piccolo gateway --plan` takes the plan.
func (il *inferLine) plan(st []ilChoice) *api.Plan {
	mods := il.modulePlans(st)
	// through[i]: the longest WCL path through module i (to it, plus after it).
	index := map[string]int{}
	for i, m := range mods {
		index[m.Name] = i
	}
	bursts := make([]float64, len(mods))
	for i := range mods {
		bursts[i] = planner.Burst(mods[i])
	}
	for i := range mods {
		beta := 0.0
		for _, p := range mods[i].After {
			beta = max(beta, bursts[index[p]])
		}
		mods[i].WCLMs += 1000 * beta
	}
	to := make([]float64, len(mods))
	from := make([]float64, len(mods))
	var toF func(i int) float64
	toF = func(i int) float64 {
		if to[i] > 0 {
			return to[i]
		}
		longest := 0.0
		for _, p := range mods[i].After {
			longest = max(longest, toF(index[p]))
		}
		to[i] = longest + mods[i].WCLMs
		return to[i]
	}
	var fromF func(i int) float64
	fromF = func(i int) float64 {
		if from[i] > 0 {
			return from[i]
		}
		longest := 0.0
		for j, c := range mods {
			if slices.Contains(c.After, mods[i].Name) {
				longest = max(longest, fromF(j))
			}
		}
		from[i] = longest + mods[i].WCLMs
		return from[i]
	}
	sloMs := float64(il.slo) / float64(time.Millisecond)
	latency, cost := 0.0, 0.0
	for i := range mods {
		through := toF(i) + fromF(i) - mods[i].WCLMs
		mods[i].BudgetMs = sloMs * mods[i].WCLMs / through
		latency = max(latency, through)
		cost += mods[i].Cost
	}
	return &api.Plan{Policy: "inferline-trace", LatencyModel: "tc-exact", MaxUtilization: 1, TotalCost: cost,
		Sessions: []api.SessionPlan{{Name: il.session.Name, SLOMs: sloMs, LatencyMs: latency, Cost: cost, Modules: mods}}}
}
