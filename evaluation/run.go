package evaluation

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/simulate"
)

// Options are the equal footing every variant is planned and checked under.
type Options struct {
	// Utilizations is the one headroom rule every policy, baseline, ablation and
	// the optimum plans under: plan at the first utilization cap
	// (planner.Options.MaxUtilization), simulate, and while the simulation
	// misses Target plan again at the next, lower cap — the rule
	// simulate.PlanForBursts applies to the gateway's plans. Each in (0, 1],
	// decreasing.
	Utilizations []float64
	// Target is the simulated SLO attainment a plan must reach, in (0, 1]; a plan
	// below it is a miss.
	Target float64
	// SimDuration is the virtual time of each plan's simulation (Poisson
	// arrivals at the planned rates).
	SimDuration time.Duration
	// SimItems, when > 0, bounds each simulation to about that many module
	// items (simulate.Options.MaxItems): a plan at a high rate simulates a
	// shorter stretch than SimDuration. 0: no bound.
	SimItems int
	// Seed seeds the simulations (workload i uses Seed + i).
	Seed uint64
	// Admission simulates every plan as the gateway serves it
	// (simulate.Options.Admission: the request's deadline, admission's
	// refusals counted as misses), as the gateway's own burst check does
	// (ServingOptions). False: the paper's dispatcher, in which an item's
	// deadline is its module budget (the paper's evaluation).
	Admission bool
	// Flush is the flush rule every plan is simulated with (nil:
	// dispatcher.FlushDeadline, the paper's); ServingOptions sets the
	// gateway's (the idle flush), as its burst check simulates.
	Flush dispatcher.Flush
	// Workers is how many workloads run at once (0: GOMAXPROCS). Each
	// workload's outcomes depend on its seed only, so the numbers do not
	// change with it; planner runtimes are measured on a machine that many
	// workloads share.
	Workers int
	// InferLineEvery, when > 0, also plans every InferLineEvery-th workload
	// (0, k, 2k, …) with the project's InferLine planner
	// (simulate.PlanInferLine: whole replicas, feasibility by simulating a
	// Poisson trace of InferLineTrace), beside the Table III caricature
	// "inferline". 0: not run.
	InferLineEvery int
	// InferLineTrace is the length of that planning trace (0: 10 s).
	InferLineTrace time.Duration
}

// DefaultOptions: caps from 0.8 (piccolo's serving default, docs/planner.md)
// down to 0.5 in steps of 0.05; 99% of requests within the SLO over 20 s of
// simulated Poisson arrivals.
// The project's InferLine planner runs on every 10th workload (its search
// simulates each candidate on a trace and 8 resamples of it: 0.4–2 s a
// workload).
var DefaultOptions = Options{Utilizations: []float64{0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5}, Target: 0.99, SimDuration: 20 * time.Second, Seed: 1,
	InferLineEvery: 10, InferLineTrace: 10 * time.Second}

// Variant is one column of the evaluation: a planner configuration and the
// dispatch its plans are simulated with.
type Variant struct {
	Name    string
	Options planner.Options
	// RoundRobin simulates the plan under round-robin dispatch (dispatcher.RR):
	// the baselines' own (Table III) and that of Picc-2d and Picc-dt, whose
	// latency models assume it; every other variant runs under TC.
	RoundRobin bool
}

// Systems are Fig. 4's columns: Piccolo, the paper's Piccolo, the four systems
// of Table III and the optimum (under piccolo's model).
var Systems = []string{"piccolo", "paper", "nexus", "scrooge", "inferline", "clipper", "optimal"}

// Diagnostics are columns that explain a gap rather than reproduce a figure:
// "paper-exact" is the paper's Piccolo (Algorithm 1, residual at its own
// rate) with the exact collection time (b−1)/w in place of Theorem 1's b/w
// (docs/evaluation.md, "Why the paper's Piccolo is dear").
var Diagnostics = []string{"paper-exact"}

// Ablations are Fig. 5's, in its order.
var Ablations = []string{"np", "nb", "nh", "1bpc", "2bpc", "2d", "dt", "tb", "q0.01", "q0.1", "0re", "1re", "nd"}

// Variants returns every column, all planned at util (the first cap): Systems, then each
// ablation of piccolo ("piccolo-nb", …) and of the paper's Piccolo
// ("paper-nb", …), from planner.BenchVariants so the two benchmarks
// ablate the same way.
func Variants(util float64) []Variant {
	byName := map[string]planner.Variant{}
	for _, v := range planner.BenchVariants() {
		byName[v.Name] = v
	}
	byName["optimal"] = planner.Variant{Name: "optimal", Options: planner.Options{Policy: "optimal", Reference: "piccolo"}}
	byName["paper-exact"] = planner.Variant{Name: "paper-exact", Options: planner.Options{Policy: "paper", Model: "tc-exact"}}
	var names []string
	names = append(names, Systems...)
	names = append(names, Diagnostics...)
	for _, base := range []string{"piccolo", "paper"} {
		for _, a := range Ablations {
			names = append(names, base+"-"+a)
		}
	}
	out := make([]Variant, 0, len(names))
	for _, n := range names {
		v, ok := byName[n]
		if !ok {
			panic("evaluation: planner.BenchVariants has no " + n) // a renamed ablation; every test catches it
		}
		o := v.Options
		o.MaxUtilization = util
		rr := o.Model == "rr-2d" || o.Model == "local"
		switch o.Policy {
		case "nexus", "scrooge", "inferline", "clipper":
			rr = true
		}
		out = append(out, Variant{Name: n, Options: o, RoundRobin: rr})
	}
	return out
}

// Outcome is one variant on one workload.
type Outcome struct {
	Planned bool // the planner found a plan (else infeasible under its model)
	// Cost is what the plan is charged, in cost units: the larger of its planned
	// cost (machines × price) and the device time its simulation really
	// occupied, at the same headroom (occupancy × price / Utilization, each
	// batch counted at its profiled duration for the size it had: occupied). The
	// paper charges by occupancy (§IV-A, Metrics); a plan whose batches do not
	// fill (round-robin spreads a module's items over all its machines) runs more
	// batches than it planned and occupies more than it pays for.
	Cost        float64
	PlannedCost float64
	Attainment  float64 // simulated share of requests within the SLO
	Met         bool    // Planned and Attainment ≥ Options.Target
	// Utilization is the cap of the plan kept: the first of
	// Options.Utilizations whose simulation met the target (the last when none did).
	Utilization float64
	// RemainingMs is the SLO minus the plan's longest path (Fig. 11).
	RemainingMs float64
	// SourceThroughput is Fig. 6's "throughput for a given module": the
	// source module's profiled throughput per machine, req/s, averaged over
	// its config groups weighted by their machines (Σ machines·t / Σ
	// machines) — what its configs (batch, concurrency, hardware) can serve
	// per machine.
	SourceThroughput float64
	Runtime          time.Duration // planning time of the plan kept (the last cap tried)
}

// PlannerOutcome is the project's InferLine planner (simulate.PlanInferLine)
// on one workload: whole replicas, no headroom rule (its own simulation
// decides), simulated again like every plan.
type PlannerOutcome struct {
	Workload int
	Planned  bool
	// Cost is the whole replicas' cost; Occupied the device time its
	// simulation occupied, in cost units per second (occupied).
	Cost, Occupied float64
	Attainment     float64
	Met            bool
	Runtime        time.Duration
}

// WCLRatio is one config group of piccolo's plan under the other dispatch
// models (Fig. 8): its WCL under 2d (round-robin) and d + b/t (Scrooge's
// machine-local throughput) over its WCL under TC dispatch.
type WCLRatio struct {
	Workload       int
	Module         string
	RR2d, LocalDBT float64
}

// Result is Run's outcome: Outcomes[v][w] for Variants[v] on Workloads[w].
type Result struct {
	Options   Options
	Workloads []Workload
	Variants  []Variant
	Outcomes  [][]Outcome
	WCL       []WCLRatio
	// InferLine holds the project's InferLine planner on every
	// Options.InferLineEvery-th workload, in workload order.
	InferLine []PlannerOutcome
	Elapsed   time.Duration
}

// Index returns the position of the named variant in r.Variants, or −1.
func (r *Result) Index(name string) int {
	for i, v := range r.Variants {
		if v.Name == name {
			return i
		}
	}
	return -1
}

// Run plans every workload with every variant under o and simulates every plan.
// A planner error other than infeasibility, a plan that fails planner.Verify or
// a simulation error stops the run with an error naming the workload and variant.
func Run(ws []Workload, o Options, progress func()) (*Result, error) {
	if len(o.Utilizations) == 0 {
		return nil, errors.New("no utilization cap: want at least one, in (0, 1]")
	}
	for i, u := range o.Utilizations {
		if !(u > 0 && u <= 1) || (i > 0 && u >= o.Utilizations[i-1]) {
			return nil, fmt.Errorf("utilization caps %v: each must be in (0, 1], decreasing", o.Utilizations)
		}
	}
	switch {
	case !(o.Target > 0 && o.Target <= 1):
		return nil, fmt.Errorf("attainment target %v: must be in (0, 1]", o.Target)
	case o.SimDuration <= 0:
		return nil, fmt.Errorf("simulated duration %v: must be > 0", o.SimDuration)
	}
	start := time.Now()
	vs := Variants(o.Utilizations[0])
	res := &Result{Options: o, Workloads: ws, Variants: vs, Outcomes: make([][]Outcome, len(vs))}
	for v := range vs {
		res.Outcomes[v] = make([]Outcome, len(ws))
	}
	wcl := make([][]WCLRatio, len(ws))
	il := make([]*PlannerOutcome, len(ws))
	errs := make([]error, len(ws))
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex // progress
	for range min(workers, max(len(ws), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range next {
				wl := ws[w]
				for v, variant := range vs {
					out, plan, err := runOne(wl, variant, o, o.Seed+uint64(w))
					if err != nil {
						errs[w] = fmt.Errorf("workload %d (%s), %s: %w", w, wl.App, variant.Name, err)
						break
					}
					res.Outcomes[v][w] = out
					if variant.Name == "piccolo" && plan != nil {
						wcl[w] = wclRatios(w, plan)
					}
				}
				if errs[w] == nil && o.InferLineEvery > 0 && w%o.InferLineEvery == 0 {
					po, err := runInferLine(wl, o, o.Seed+uint64(w))
					if err != nil {
						errs[w] = fmt.Errorf("workload %d (%s), InferLine's planner: %w", w, wl.App, err)
					}
					po.Workload = w
					il[w] = &po
				}
				if progress != nil {
					mu.Lock()
					progress()
					mu.Unlock()
				}
			}
		}()
	}
	for w := range ws {
		if errs[w] != nil {
			break
		}
		next <- w
	}
	close(next)
	wg.Wait()
	for w := range ws {
		if errs[w] != nil {
			return nil, errs[w]
		}
		res.WCL = append(res.WCL, wcl[w]...)
		if il[w] != nil {
			res.InferLine = append(res.InferLine, *il[w])
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// runInferLine plans wl with the project's InferLine planner on a Poisson
// trace of o.InferLineTrace at the source module's rate, then simulates the
// plan as every other (Poisson, o.SimDuration, its own dispatch: TC among
// replicas of one config). A session it cannot plan (no feasible plan within
// its replica limit) is an outcome with Planned false, not an error.
func runInferLine(wl Workload, o Options, seed uint64) (PlannerOutcome, error) {
	horizon := o.InferLineTrace
	if horizon <= 0 {
		horizon = 10 * time.Second
	}
	proc, err := arrival.Spec{Kind: "poisson", Rate: wl.Config.Sessions[0].Modules[0].Rate}.New(seed)
	if err != nil {
		return PlannerOutcome{}, err
	}
	tr, err := arrival.Record(proc, horizon, "poisson")
	if err != nil {
		return PlannerOutcome{}, err
	}
	t0 := time.Now()
	run, _, err := simulate.PlanInferLine(wl.Config, o.Target, simulate.Options{Trace: tr, Seed: seed})
	out := PlannerOutcome{Runtime: time.Since(t0)}
	if err != nil {
		return out, nil // infeasible under its search
	}
	p := run.Plan
	sp := p.Sessions[0]
	rep, err := simulate.Run(p, simulate.Options{Flush: o.Flush, Arrival: "poisson", Duration: o.SimDuration, MaxItems: o.SimItems, Seed: seed, Admission: o.Admission})
	if err != nil {
		return out, fmt.Errorf("simulating: %w", err)
	}
	out.Planned, out.Cost, out.Attainment = true, p.TotalCost, 1
	for _, s := range rep.Sessions {
		out.Attainment = min(out.Attainment, s.SLOAttainment)
	}
	out.Occupied = occupied(wl.Config, sp, rep)
	out.Met = out.Attainment >= o.Target
	return out, nil
}

// runOne applies the headroom rule (Options.Utilizations) to one variant on one
// workload and returns the outcome of the plan kept.
func runOne(wl Workload, v Variant, o Options, seed uint64) (Outcome, *api.Plan, error) {
	var (
		out Outcome
		p   *api.Plan
		err error
	)
	for _, u := range o.Utilizations {
		v.Options.MaxUtilization = u
		out, p, err = planAndSimulate(wl, v, o, seed)
		if err != nil || !out.Planned || out.Met {
			break
		}
	}
	return out, p, err
}

func planAndSimulate(wl Workload, v Variant, o Options, seed uint64) (Outcome, *api.Plan, error) {
	t0 := time.Now()
	p, err := planner.Plan(wl.Config, v.Options)
	out := Outcome{Runtime: time.Since(t0), Utilization: v.Options.MaxUtilization}
	switch {
	case errors.Is(err, planner.ErrInfeasible):
		return out, nil, nil
	case err != nil:
		return out, nil, err
	}
	if err := planner.Verify(wl.Config, p); err != nil {
		return out, nil, fmt.Errorf("plan fails its check: %w", err)
	}
	sp := p.Sessions[0]
	out.Planned, out.PlannedCost = true, p.TotalCost
	out.RemainingMs = sp.SLOMs - sp.LatencyMs
	var machines, served float64
	for _, g := range sp.Modules[0].Configs {
		machines += g.Machines
		served += g.Machines * g.Throughput
	}
	if machines > 0 {
		out.SourceThroughput = served / machines
	}
	var pol dispatcher.Policy = dispatcher.TC{}
	if v.RoundRobin {
		pol = dispatcher.RR{}
	}
	rep, err := simulate.Run(p, simulate.Options{Policy: pol, Flush: o.Flush, Arrival: "poisson", Duration: o.SimDuration, MaxItems: o.SimItems, Seed: seed, Admission: o.Admission})
	if err != nil {
		return out, nil, fmt.Errorf("simulating: %w", err)
	}
	out.Attainment = 1
	for _, s := range rep.Sessions {
		out.Attainment = min(out.Attainment, s.SLOAttainment)
	}
	out.Cost = max(out.PlannedCost, occupied(wl.Config, sp, rep)/v.Options.MaxUtilization)
	out.Met = out.Attainment >= o.Target
	return out, p, nil
}

// occupied returns the cost units per second the simulation in rep occupied:
// for every machine, its batches times the profiled duration of their mean size
// (linear between profile entries; the simulator runs each batch for its
// config's full duration, which would overcharge partial batches), over its
// concurrency and the arrival window, times its hardware's price.
func occupied(cfg *api.Config, sp api.SessionPlan, rep *simulate.Report) float64 {
	total := 0.0
	for _, s := range rep.Sessions {
		if s.Name != sp.Name {
			continue
		}
		for i, m := range s.Modules {
			mp := sp.Modules[i]
			for _, sl := range m.Slots {
				if sl.Group >= len(mp.Configs) || sl.Batches == 0 {
					continue
				}
				g := mp.Configs[sl.Group]
				d := durationAt(cfg, mp.Model, g, sl.MeanBatch)
				total += float64(sl.Batches) * d / float64(max(g.Concurrency, 1)) / rep.DurationS * g.Price
			}
		}
	}
	return total
}

// durationAt returns the profiled duration, in seconds, of a batch of size b of
// model on g's hardware and concurrency: api.DurationAt (linear between the
// entries around b, the project's one model of a partial batch, which the
// emulated backend runs), g's own duration when b is at or above g's batch
// or nothing is profiled there.
func durationAt(cfg *api.Config, model string, g api.GroupPlan, b float64) float64 {
	full := g.DurationMs / 1000
	if b >= float64(g.Batch) {
		return full
	}
	for _, p := range cfg.ProfilesOf(model) {
		if p.Hardware == g.Hardware {
			if d, ok := api.DurationAt(p.Entries, g.Concurrency, b); ok {
				return d.Seconds()
			}
		}
	}
	return full
}

// wclRatios returns Fig. 8's ratios for every group of plan: the group's WCL
// under rr-2d and local over its WCL under the plan's own model, at the group's
// stream rate (its rate and that of every group after it, Theorem 1).
func wclRatios(w int, plan *api.Plan) []WCLRatio {
	rr, _ := planner.ModelByName("rr-2d")
	dt, _ := planner.ModelByName("local")
	own, err := planner.ModelByName(plan.LatencyModel)
	if err != nil {
		return nil
	}
	var out []WCLRatio
	for _, m := range plan.Sessions[0].Modules {
		stream := 0.0
		for i := len(m.Configs) - 1; i >= 0; i-- {
			g := m.Configs[i]
			stream += g.Rate
			c := planner.Candidate{Hardware: g.Hardware, Price: g.Price, Batch: g.Batch, Concurrency: g.Concurrency,
				Duration: g.DurationMs / 1000, Throughput: g.Throughput}
			tc := own.WCL(c, stream)
			if !(tc > 0) || math.IsInf(tc, 0) {
				continue
			}
			out = append(out, WCLRatio{Workload: w, Module: m.Name, RR2d: rr.WCL(c, stream) / tc, LocalDBT: dt.WCL(c, stream) / tc})
		}
	}
	return out
}

// base returns the policy an ablation is normalized to ("piccolo-nb" →
// "piccolo"), or "piccolo" for a system.
func base(name string) string {
	if i := strings.IndexByte(name, '-'); i > 0 {
		return name[:i]
	}
	return "piccolo"
}
