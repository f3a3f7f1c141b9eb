package controlplane

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// DefaultBurstTarget is the share of simulated Poisson requests that must meet
// the SLO when the utilisation is not given (--burst-target).
const DefaultBurstTarget = 0.999

// Planner makes a plan for a config: scheduler.Plan, or PlanForServing (the
// serving planner of `piccolo gateway`). A plan may carry per-session
// errors (sessions it could not plan); err is for a config it could not plan at
// all. Called from ConfigStore.Update's goroutine (checking a change) and from
// the control loop's, one call at a time on each.
type Planner func(cfg *api.Config) (*api.Plan, error)

// Pipeline is the one route of a config change (docs/architecture.md, "Config
// path"): fuse → plan → check → place → apply, each step once per change, the
// plan passed along. The gateway's Control runs the first three here (Fuse,
// Plan, Check) on ConfigStore.Update's goroutine and hands the checked plan to
// the control loop (replan.Controller.SetPlanned), which places it
// (Options.Place) and applies it (Options.Publish: LiveSwitch.Apply). A rate
// re-plan enters at Plan: the control loop's planner is Pipeline.Plan. Every
// entry (admin API, -c file watcher, Consul KV, the rate controller) takes this
// route. A Pipeline is immutable and safe from any goroutine.
type Pipeline struct {
	// Planner is the plan step (policy, variants, burst headroom):
	// PlanForServing with the gateway's options.
	Planner Planner
	// NoFusion skips the fuse step (--no-fusion).
	NoFusion bool
	// Fusions, when set, is told each fusion made, one line each.
	Fusions io.Writer
}

// Fuse is the fuse step: cfg with the planner's fusion decision applied
// (scheduler.Fuse, docs/fusion.md), each fusion named on p.Fusions; cfg itself
// with NoFusion. Errors only when the planner makes no plan at all.
func (p Pipeline) Fuse(cfg *api.Config) (*api.Config, error) {
	if p.NoFusion {
		return cfg, nil
	}
	w := p.Fusions
	if w == nil {
		w = io.Discard
	}
	return FuseConfig(cfg, p.Planner, w)
}

// FuseConfig applies the planner's fusion decision (scheduler.Fuse) to cfg and
// names each fusion made on w. `piccolo plan` fuses with it too.
func FuseConfig(cfg *api.Config, plan func(*api.Config) (*api.Plan, error), w io.Writer) (*api.Config, error) {
	out, fusions, err := scheduler.Fuse(cfg, plan)
	if err != nil {
		return nil, err
	}
	for _, f := range fusions {
		fmt.Fprintln(w, f)
	}
	return out, nil
}

// Plan is the plan step: the planner's plan for cfg, unplaced. A nil plan is
// an error matching ErrNoPlan; a plan whose sessions partly failed comes with
// the planner's error for them.
func (p Pipeline) Plan(cfg *api.Config) (*api.Plan, error) {
	plan, err := p.Planner(cfg)
	if plan == nil {
		if err == nil {
			err = errors.New("the planner returned no plan")
		}
		return nil, noPlanError{err}
	}
	return plan, err
}

// PlanForServing plans for serving: with a utilisation given, as asked; without,
// the cheapest plan whose simulation under Poisson arrivals meets the SLO for
// burstTarget of requests (simulate.PlanForBursts), so the headroom follows the
// plan's slack instead of a fixed guess. When the config lists backends, only
// their hardware types are planned for: a catalog may name types the cluster
// does not have (with Consul, the leader does the same with its members), and
// as many devices of each as listed (scheduler.Options.Pool, unless opts
// sets one). burstTarget 0 means DefaultBurstTarget. `piccolo gateway`, `piccolo scheduler`
// and the demo plan with it.
func PlanForServing(cfg *api.Config, opts scheduler.Options, burstTarget float64) (*api.Plan, error) {
	cfg = replan.OnlyPresent(cfg, presentHardware(cfg.Backends))
	if opts.Pool == nil && len(cfg.Backends) > 0 {
		// Plan for the devices listed: a type the cheapest plan needs more of
		// than the pool has gets a module split across types
		// (docs/calibration.md, "Pool-aware planning").
		opts.Pool = map[string]int{}
		for _, b := range cfg.Backends {
			opts.Pool[b.Hardware]++
		}
	}
	if opts.MaxUtilization != 0 {
		return scheduler.Plan(cfg, opts)
	}
	if burstTarget == 0 {
		burstTarget = DefaultBurstTarget
	}
	plan, _, err := simulate.PlanForBursts(cfg, opts, burstTarget, 1)
	if opts.Pool != nil && plan != nil && plan.MaxUtilization < simulate.Utilizations[0] && missing(plan, cfg.Backends) > 0 {
		// The headroom the simulation asked for needs devices the pool does
		// not have: a plan short of devices shares them and refuses (or
		// fails late) far more requests than less headroom does. Take the
		// most headroom that fits, if any does.
		for i := len(simulate.Utilizations) - 1; i >= 0; i-- {
			if simulate.Utilizations[i] <= plan.MaxUtilization {
				continue
			}
			o := opts
			o.MaxUtilization = simulate.Utilizations[i]
			if q, qerr := scheduler.Plan(cfg, o); q != nil && missing(q, cfg.Backends) == 0 && !replan.FailsMore(q, plan) {
				plan, err = q, qerr
				break
			}
		}
	}
	if opts.Pool != nil && plan != nil && missing(plan, cfg.Backends) == 0 {
		plan, err = poolHeadroom(cfg, opts, plan, err)
	}
	return plan, err
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
func poolHeadroom(cfg *api.Config, opts scheduler.Options, p *api.Plan, err error) (*api.Plan, error) {
	scaled := func(s float64) *api.Config {
		rates := replan.Declared(cfg)
		for k := range rates {
			rates[k] *= s
		}
		return replan.WithRates(cfg, rates)
	}
	free := opts
	free.Pool, free.MaxUtilization = nil, p.MaxUtilization
	if q, _ := scheduler.Plan(scaled(poolRates[len(poolRates)-1]), free); q == nil || missing(q, cfg.Backends) == 0 {
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
			o.MaxUtilization = u
			if q, qerr := scheduler.Plan(scaled, o); q != nil && missing(q, cfg.Backends) == 0 && !replan.FailsMore(q, p) {
				best, bestErr, bestCap = q, qerr, s/u
			}
		}
	}
	return best, bestErr
}

// missing is how many devices placing p on the backends bs misses.
func missing(p *api.Plan, bs []api.Backend) int {
	_, short, err := placement.Place(p, placement.Members(bs), nil, placement.Options{})
	if err != nil {
		return 1 << 30
	}
	return short.Missing()
}

// presentHardware is the set of hardware types bs have.
func presentHardware(bs []api.Backend) map[string]bool {
	present := map[string]bool{}
	for _, b := range bs {
		present[b.Hardware] = true
	}
	return present
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
