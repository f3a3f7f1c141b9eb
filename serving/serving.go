package serving

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// DefaultBurstTarget is the share of simulated Poisson requests that must meet
// the SLO when the utilisation is not given (--burst-target).
const DefaultBurstTarget = 0.999

// Planner makes a plan for a config: Options.Planner (Plan with the serving
// options), a TracePlanner's or a FilePlanner's Plan. A plan may carry
// per-session errors (sessions it could not plan); err is for a config it
// could not plan at all. Called from the config store's goroutine (checking
// a change) and from the control loop's, one call at a time on each.
type Planner func(cfg *api.Config) (*api.Plan, error)

// Options are what shapes the served plan besides the config: the planner's
// options (--policy, --max-utilization and the rest) and the burst target.
// The zero value is `piccolo gateway`'s and `piccolo plan`'s default.
type Options struct {
	// Scheduler are the planner's options. MaxUtilization 0 chooses the
	// utilisation by simulation (the burst check); Pool nil plans for the
	// devices cfg.Backends lists.
	Scheduler planner.Options
	// BurstTarget is the share of simulated Poisson requests that must meet
	// the SLO (--burst-target), in (0, 1]; 0 means DefaultBurstTarget.
	BurstTarget float64
	// NoAdmission says the gateway serves without admission
	// (--admission=false): the burst check then simulates the paper's
	// dispatcher (module budgets as deadlines, nothing refused), which
	// misses more than the gateway serving without admission does, rather
	// than admission's refusals, which free capacity a gateway that admits
	// everything does not get back. False: the gateway's default.
	NoAdmission bool
	// Dispatch is the gateway's dispatch (--dispatch; nil: TC), which the
	// burst check simulates.
	Dispatch dispatcher.Policy
	// Flush is the gateway's flush rule (--flush; nil: DefaultHeadroom.Flush,
	// the gateway's default, idle), which the burst check simulates.
	Flush dispatcher.Flush
}

// Planner returns Plan with o as a Planner.
func (o Options) Planner() Planner {
	return func(cfg *api.Config) (*api.Plan, error) { return Plan(cfg, o) }
}

// Headroom is the burst check's rule: the utilisation caps tried in order,
// the share of simulated Poisson requests that must meet the SLO, the
// simulation's length and its bound in items, and the seed. Plan applies
// DefaultHeadroom (with Options.BurstTarget); the evaluation holds every
// policy to it (evaluation.ServingOptions).
type Headroom struct {
	Utilizations []float64
	Target       float64
	// Duration is the longest virtual time simulated; Items bounds the items
	// (module executions) simulated, so a plan at a high rate simulates a
	// shorter stretch (simulate.BurstWindow).
	Duration time.Duration
	Items    int
	Seed     uint64
	// Admission simulates each candidate as the gateway serves it by default
	// (simulate.BurstCheck.Admission: the request's deadline, admission's
	// refusals counted as misses); false, the paper's dispatcher.
	Admission bool
	// Flush is the flush rule each candidate is simulated with: the one the
	// gateway serves with (simulate.BurstCheck.Flush).
	Flush dispatcher.Flush
}

// DefaultHeadroom is the gateway's burst check (simulate.PlanForBursts): the
// gateway's own semantics, since it serves with admission and the idle flush
// by default (`piccolo gateway --flush`'s default).
var DefaultHeadroom = Headroom{Utilizations: simulate.Utilizations, Target: DefaultBurstTarget,
	Duration: simulate.BurstDuration, Items: simulate.BurstItems, Seed: 1, Admission: true, Flush: dispatcher.FlushIdle}

// Check is h's simulation with target as simulate.PlanForBursts takes it.
func (h Headroom) Check(target float64) simulate.BurstCheck {
	return simulate.BurstCheck{Target: target, Seed: h.Seed, Admission: h.Admission, Flush: h.Flush}
}

// Plan is the plan a gateway serves for cfg (the config at the rates to plan
// for, its backends the pool), the one answer every caller asks: the
// gateway's config pipeline, its control loop (config changes, membership
// changes, rate and drift re-plans), the cluster's re-planner, `piccolo
// plan`, the demo and the evaluation's serving rule.
//
//   - Headroom: with o.Scheduler.MaxUtilization given, planner.Plan as
//     asked; without, the cheapest plan whose simulation under Poisson
//     arrivals meets the SLO for the burst target of requests
//     (simulate.PlanForBursts, bounded in items so its work does not grow
//     with the rate), so the headroom follows the plan's slack.
//   - Pool: when cfg lists backends, only their hardware types are planned
//     for (a catalog may name types the cluster does not have), and the
//     planner is told how many devices of each (planner.Options.Pool): a
//     type the cheapest plan needs more of than the pool has gets a module
//     split across types. Where the simulation's headroom needs devices the
//     pool lacks, the most headroom that fits is taken; where the pool
//     binds within the headroom, the plan is made for a higher rate
//     (poolHeadroom).
//   - Fit: a plan that still needs more devices than the pool has (a drift
//     re-plan whose calibrated profiles are 2× the profiled ones, a rate
//     the pool cannot carry) is planned again for the rate the pool can
//     carry (fitRate): the rates of the sessions on a short type lowered in
//     proportion, then raised by bisection to the highest that fits. The
//     plan's module rates say what it
//     carries; admission refuses the rest. A plan of 61 machines on a pool
//     of one is never returned while a smaller rate fits.
//
// Errors: the planner's (per-session errors with a plan; none without).
func Plan(cfg *api.Config, o Options) (*api.Plan, error) {
	present := Hardware(cfg.Backends)
	return plan(cfg, o, func(c *api.Config, opts planner.Options) (*api.Plan, error) {
		return planPresent(c, opts, present)
	})
}

// planFunc is planner.Plan as Plan's steps call it: planPresent.
type planFunc = func(*api.Config, planner.Options) (*api.Plan, error)

// planPresent is planner.Plan for the hardware types in present (every type
// when present is empty): cfg with only those types (replan.OnlyPresent),
// or cfg as it is where its plan uses only those types and is better (it
// misses no more devices, and costs less). The catalog's other types are
// not planned for, but the budget splits read every type's profiles:
// Scrooge's throughput split gives m2 of the demo's chain 360 ms with the
// T4 in view and 209 ms without, so batch 1 and 18.12 cost units instead of
// 11.65 on the same V100s, one V100 more than the demo starts.
//
// Session by session: a session whose whole-catalog plan is on an absent
// type (OCR's det on the cpu-2t the demo does not start, once its cpu-1t
// profile is calibrated slower) keeps its plan on the present types, and
// the others still get theirs; the mix is served where placing it misses
// no more devices and it costs less.
func planPresent(cfg *api.Config, opts planner.Options, present map[string]bool) (*api.Plan, error) {
	only := replan.OnlyPresent(cfg, present)
	p, err := planner.Plan(only, opts)
	if only == cfg || p == nil {
		return p, err
	}
	q, _ := planner.Plan(cfg, opts)
	if q == nil || len(q.Sessions) != len(p.Sessions) {
		return p, err
	}
	mixed := *p
	mixed.Sessions = slices.Clone(p.Sessions)
	mixed.TotalCost = 0
	took := false
	for i := range mixed.Sessions {
		qs := &q.Sessions[i]
		ps := &p.Sessions[i]
		if qs.Name == ps.Name && qs.Error == "" && sessionUsesOnly(qs, present) && (ps.Error != "" || qs.Cost < ps.Cost*(1-1e-9)) {
			mixed.Sessions[i], took = *qs, true
		}
		mixed.TotalCost += mixed.Sessions[i].Cost
	}
	// Every session taken is cheaper or planned where p's is not, so the mix
	// leaves no more sessions unplanned: it is served when it places no
	// worse, and plans more sessions or costs less.
	planned := unplanned(&mixed) < unplanned(p)
	if !took || missing(&mixed, cfg.Backends) > missing(p, cfg.Backends) || !planned && mixed.TotalCost >= p.TotalCost*(1-1e-9) {
		return p, err
	}
	if !planned {
		return &mixed, err
	}
	// The planner's error names the sessions p could not plan: keep only
	// those the mix still cannot.
	var errs []error
	for _, sp := range mixed.Sessions {
		if sp.Error != "" {
			errs = append(errs, errors.New(sp.Error))
		}
	}
	return &mixed, errors.Join(errs...)
}

// unplanned is how many sessions of p could not be planned.
func unplanned(p *api.Plan) int {
	n := 0
	for _, sp := range p.Sessions {
		if sp.Error != "" {
			n++
		}
	}
	return n
}

// sessionUsesOnly reports whether every config group of sp is on a hardware
// type in present.
func sessionUsesOnly(sp *api.SessionPlan, present map[string]bool) bool {
	for _, mp := range sp.Modules {
		for _, g := range mp.Configs {
			if !present[g.Hardware] {
				return false
			}
		}
	}
	return true
}

// plan is Plan with pl as its planner.
func plan(cfg *api.Config, o Options, pl planFunc) (*api.Plan, error) {
	opts := o.Scheduler
	if opts.Pool == nil && len(cfg.Backends) > 0 {
		opts.Pool = map[string]int{}
		for _, b := range cfg.Backends {
			opts.Pool[b.Hardware]++
		}
	}
	if opts.MaxUtilization != 0 {
		p, err := pl(cfg, opts)
		if opts.Pool != nil && p != nil && missing(p, cfg.Backends) > 0 {
			p, err = fitRate(cfg, opts, p, err, pl)
		}
		return p, err
	}
	target := o.BurstTarget
	if target == 0 {
		target = DefaultBurstTarget
	}
	h := DefaultHeadroom
	h.Admission = !o.NoAdmission
	if o.Flush != nil {
		h.Flush = o.Flush
	}
	check := h.Check(target)
	check.Plan, check.Dispatch = pl, o.Dispatch
	plan, _, err := simulate.PlanForBursts(cfg, opts, check)
	if opts.Pool == nil || plan == nil {
		return plan, err
	}
	if lowest(plan) < simulate.Utilizations[0] && missing(plan, cfg.Backends) > 0 {
		// The headroom the simulation asked for needs devices the pool does
		// not have: a plan short of devices shares them and refuses (or
		// fails late) far more requests than less headroom does. Take the
		// most headroom that fits, if any does: every session's cap raised
		// to at least u.
		for i := len(simulate.Utilizations) - 1; i >= 0; i-- {
			u := simulate.Utilizations[i]
			if u <= lowest(plan) {
				continue
			}
			o := opts
			o.MaxUtilization, o.SessionUtilization = caps(plan, 1, u)
			if q, qerr := pl(cfg, o); q != nil && missing(q, cfg.Backends) == 0 && !replan.FailsMore(q, plan) {
				plan, err = q, qerr
				break
			}
		}
	}
	if missing(plan, cfg.Backends) > 0 {
		return fitRate(cfg, opts, plan, err, pl)
	}
	return poolHeadroom(cfg, opts, plan, err, pl)
}

// fitRateTries bounds the planner runs fitRate makes to find a rate that
// fits; 2×fitRateBisections bound those it then makes to raise it.
const (
	fitRateTries      = 4
	fitRateBisections = 4
	// fitRateTolerance ends a bisection once its bounds are this close
	// (a ratio): at most 2×fitRateBisections runs, fewer on a narrow range.
	fitRateTolerance = 0.01
)

// fitRate returns, for a plan p of cfg that needs more devices than the
// pool (cfg.Backends) has, a plan of cfg at lower module rates that fits
// it: the rate of every module of the sessions on a type the pool is short
// of (shortSessions) scaled by s, s the smallest present/needed ratio
// over the types short (machines grow about linearly with the rate), and
// again by the next plan's ratio while it still misses, at most
// fitRateTries planner runs, at p's utilisation. Once a scale fits, it is
// raised by geometric bisection between it and the lowest scale that missed
// (until the two are within fitRateTolerance, at most 2×fitRateBisections
// runs): the plan's shape can change with the rate (a
// split that moves a module to a type the pool lacks), so the first scale
// that fits can be well below the highest (Scrooge's chain at 52 req/s on
// eight V100: 43.9 req/s, where 51 fits). A candidate that leaves a session
// unplanned that p planned is not taken; when the next scale does that (a
// rate too low for the latency model), the scales between it and the last
// that planned are bisected the same way for one that plans and fits. The
// plan kept is the highest scale that fits, else the one missing the fewest
// devices; p when nothing fits better.
func fitRate(cfg *api.Config, opts planner.Options, p *api.Plan, err error, pl planFunc) (*api.Plan, error) {
	opts.MaxUtilization, opts.SessionUtilization = caps(p, 1, 0)
	sh, bestMissing := shortfall(p, cfg.Backends)
	best, bestErr := p, err
	decl := replan.Declared(cfg)
	onShort := shortSessions(p, sh)
	at := func(s float64) (*api.Plan, error) {
		rates := make(map[replan.ModuleKey]float64, len(decl))
		for k, r := range decl {
			if onShort == nil || onShort[k.Session] {
				r *= s
			}
			rates[k] = r
		}
		return pl(replan.WithRates(cfg, rates), opts)
	}
	s, missed := 1.0, 1.0 // the scale tried, the lowest that missed
	tooLow := 0.0         // the highest scale whose plan left a session unplanned (0: none)
	for range fitRateTries {
		ratio := shortRatio(sh)
		if ratio >= 1 {
			break
		}
		q, qerr := at(s * ratio)
		if q == nil || replan.FailsMore(q, p) {
			tooLow = s * ratio
			break
		}
		missed, s = s, s*ratio
		var m int
		sh, m = shortfall(q, cfg.Backends)
		if m < bestMissing {
			best, bestErr, bestMissing = q, qerr, m
		}
		if m == 0 {
			break
		}
	}
	if bestMissing > 0 && tooLow > 0 {
		// A lower rate can leave a session unplanned (the latency model's
		// collection wait grows as the rate falls: the demo's OCR session on
		// a host measured 2× slow is infeasible at 2 req/s and plans at 4.75),
		// so the scale that fits may lie between the one that left it
		// unplanned and the lowest that planned it but missed devices.
		bisectScale(tooLow, s, func(mid float64) (above, done bool) {
			q, qerr := at(mid)
			if q == nil || replan.FailsMore(q, p) {
				return true, false
			}
			m := missing(q, cfg.Backends)
			if m < bestMissing {
				best, bestErr, bestMissing = q, qerr, m
			}
			if m == 0 {
				s, missed = mid, s
				return false, true
			}
			s = mid // the lowest scale that planned and missed, so far
			return false, false
		})
	}
	if bestMissing > 0 {
		return best, bestErr
	}
	bisectScale(s, missed, func(mid float64) (above, done bool) {
		q, qerr := at(mid)
		if q != nil && !replan.FailsMore(q, p) && missing(q, cfg.Backends) == 0 {
			best, bestErr = q, qerr
			return true, false
		}
		return false, false
	})
	return best, bestErr
}

// bisectScale bisects the scales between lo and hi geometrically (they can
// span orders of magnitude: a storm's 364 req/s against the 5 a pool
// carries), at most 2×fitRateBisections probes and until the bounds are
// within fitRateTolerance: probe(mid) says whether what is sought lies above
// mid (lo = mid) or below (hi = mid), or that it was found (done).
func bisectScale(lo, hi float64, probe func(mid float64) (above, done bool)) {
	for i := 0; i < 2*fitRateBisections && hi > lo*(1+fitRateTolerance); i++ {
		mid := math.Sqrt(lo * hi)
		above, done := probe(mid)
		switch {
		case done:
			return
		case above:
			lo = mid
		default:
			hi = mid
		}
	}
}

// shortSessions is the set of sessions of p with a group on a hardware type
// placing p is short of (short, p's shortfall): the sessions fitRate lowers
// the rates of (a burst of the paper's chain on the V100 must not cut the
// OCR sessions on the CPU). nil when none is: then every session is lowered.
func shortSessions(p *api.Plan, short placement.Shortfall) map[string]bool {
	types := map[string]bool{}
	for _, h := range short.Hardware {
		if h.Needed > h.Present {
			types[h.Hardware] = true
		}
	}
	var out map[string]bool
	for _, sp := range p.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				if types[g.Hardware] {
					if out == nil {
						out = map[string]bool{}
					}
					out[sp.Name] = true
				}
			}
		}
	}
	return out
}

// shortRatio is the smallest present/needed device ratio over the hardware
// types a placement is short of (its shortfall short; 1 when none is), a
// little below it so that rounding up machines does not leave the next plan
// one device short.
func shortRatio(short placement.Shortfall) float64 {
	r := 1.0
	for _, h := range short.Hardware {
		if h.Needed > h.Present {
			r = math.Min(r, 0.95*float64(h.Present)/float64(h.Needed))
		}
	}
	return r
}

// poolRates are the scales of the module rates poolHeadroom tries.
var poolRates = []float64{1.1, 1.2, 1.3, 1.4}

// poolHeadroom returns, when the pool binds within the headroom it gives
// (the plan without it, for the largest of poolRates times the rates, would
// need devices the pool does not have), the plan that fits the pool with the
// most capacity for p's rates: planned at a scale s of the module rates
// (poolRates) and a utilisation u (simulate.Utilizations) with u/s at most
// p's utilisation, the largest s/u that fits; else p. The pool's devices are
// there whatever the plan costs; planned at a higher rate the modules take
// larger batches and carry bursts the plan at the measured rate would refuse
// (docs/calibration.md, "Pool-aware planning").
func poolHeadroom(cfg *api.Config, opts planner.Options, p *api.Plan, err error, pl planFunc) (*api.Plan, error) {
	scaled := func(s float64) *api.Config {
		rates := replan.Declared(cfg)
		for k := range rates {
			rates[k] *= s
		}
		return replan.WithRates(cfg, rates)
	}
	free := opts
	free.Pool = nil
	free.MaxUtilization, free.SessionUtilization = caps(p, 1, 0)
	if q, _ := pl(scaled(poolRates[len(poolRates)-1]), free); q == nil || missing(q, cfg.Backends) == 0 {
		return p, err
	}
	best, bestErr, bestCap := p, err, 1/p.MaxUtilization
	for _, s := range poolRates {
		scaled := scaled(s)
		for _, u := range simulate.Utilizations {
			if u/s > p.MaxUtilization+1e-9 || s/u <= bestCap+1e-9 {
				continue
			}
			o := opts
			o.MaxUtilization, o.SessionUtilization = caps(p, u/p.MaxUtilization, 0)
			if q, qerr := pl(scaled, o); q != nil && missing(q, cfg.Backends) == 0 && !replan.FailsMore(q, p) {
				best, bestErr, bestCap = q, qerr, s/u
			}
		}
	}
	return best, bestErr
}

// caps returns the planner's caps (planner.Options.MaxUtilization and
// SessionUtilization) that plan again as p was planned: each session's cap
// (p.Utilization) times scale, at least floor, at most 1.
func caps(p *api.Plan, scale, floor float64) (float64, map[string]float64) {
	per := make(map[string]float64, len(p.Sessions))
	for i := range p.Sessions {
		per[p.Sessions[i].Name] = min(1, max(floor, p.Utilization(&p.Sessions[i])*scale))
	}
	top, below := planner.SplitCaps(per)
	if len(per) == 0 {
		top = min(1, max(floor, p.MaxUtilization*scale))
	}
	return top, below
}

// lowest is the lowest cap a session of p was planned at.
func lowest(p *api.Plan) float64 {
	u := p.MaxUtilization
	for i := range p.Sessions {
		if c := p.Sessions[i].MaxUtilization; c > 0 {
			u = min(u, c)
		}
	}
	return u
}

// missing is how many devices placing p on the backends bs misses.
func missing(p *api.Plan, bs []api.Backend) int {
	_, m := shortfall(p, bs)
	return m
}

// shortfall places p on the backends bs and returns what the placement is
// short of and how many devices it misses (1<<30, with no shortfall, when
// p cannot be placed at all).
func shortfall(p *api.Plan, bs []api.Backend) (placement.Shortfall, int) {
	_, short, err := placement.Place(p, placement.Members(bs), nil, placement.Options{})
	if err != nil {
		return placement.Shortfall{}, 1 << 30
	}
	return short, short.Missing()
}

// Hardware is the set of hardware types bs have.
func Hardware(bs []api.Backend) map[string]bool {
	present := map[string]bool{}
	for _, b := range bs {
		present[b.Hardware] = true
	}
	return present
}

// Fuse is the fuse step: cfg with the planner's fusion decision applied
// (planner.Fuse, docs/fusion.md), each fusion made named on w, one line
// each. The gateway's config pipeline and `piccolo plan` fuse with it.
// Errors only when plan makes no plan at all.
func Fuse(cfg *api.Config, plan Planner, w io.Writer) (*api.Config, error) {
	out, fusions, err := planner.Fuse(cfg, plan)
	if err != nil {
		return nil, err
	}
	if w == nil {
		w = io.Discard
	}
	for _, f := range fusions {
		fmt.Fprintln(w, f)
	}
	return out, nil
}

// Served returns what a gateway started on cfg serves first: cfg fused
// (unless noFuse), each fusion named on fusions, and Plan's plan of it with
// o, unplaced. `piccolo plan` prints it; StartGateway's first plan is the
// same (TestPlanIsServed). A nil plan comes with the planner's error; a plan
// whose sessions partly failed with their errors.
func Served(cfg *api.Config, o Options, noFuse bool, fusions io.Writer) (*api.Config, *api.Plan, error) {
	planner := o.Planner()
	if !noFuse {
		var err error
		if cfg, err = Fuse(cfg, planner, fusions); err != nil {
			return nil, nil, err
		}
	}
	p, err := planner(cfg)
	return cfg, p, err
}

// Check is the check step, the rule a change must pass before it goes live:
// in plan, the plan of cfg (a change of the config prevCfg served by the plan
// prev), every session that the change adds or modifies, or that was planned
// before, must be planned; a session that failed before and is untouched does
// not refuse the change. The error names every refused session and why (the
// admin API answers 422). prev and prevCfg may be nil (nothing served yet).
func Check(plan *api.Plan, cfg *api.Config, prev *api.Plan, prevCfg *api.Config) error {
	var bad []string
	for _, sp := range plan.Sessions {
		if sp.Error == "" {
			continue
		}
		if prev != nil && prevCfg != nil && wasFailing(prev, sp.Name) && !changed(prevCfg, cfg, sp.Name) {
			continue // failing before and untouched: not this change's fault
		}
		bad = append(bad, fmt.Sprintf("session %q cannot be planned: %s", sp.Name, sp.Error))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func wasFailing(p *api.Plan, session string) bool {
	for _, sp := range p.Sessions {
		if sp.Name == session {
			return sp.Error != ""
		}
	}
	return false
}

// changed reports whether session differs between a and b (or is new in b).
// Sources (file and line) do not count.
func changed(a, b *api.Config, session string) bool {
	sa, okA := a.Session(session)
	sb, okB := b.Session(session)
	if !okA || !okB {
		return true
	}
	if sa.Name != sb.Name || sa.SLO != sb.SLO || len(sa.Modules) != len(sb.Modules) ||
		(sa.Accuracy == nil) != (sb.Accuracy == nil) || (sa.Accuracy != nil && *sa.Accuracy != *sb.Accuracy) {
		return true
	}
	sameVariant := func(x, y api.Variant) bool { return x.Model == y.Model && x.Accuracy == y.Accuracy }
	for i := range sa.Modules {
		ma, mb := sa.Modules[i], sb.Modules[i]
		if ma.Name != mb.Name || ma.Model != mb.Model || ma.Rate != mb.Rate || strings.Join(ma.After, ",") != strings.Join(mb.After, ",") ||
			!slices.EqualFunc(ma.Variants, mb.Variants, sameVariant) {
			return true
		}
	}
	return false
}
