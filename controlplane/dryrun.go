package controlplane

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// DryRun is the config pipeline's fuse, plan and check steps for cfg, a
// change of the served config, exactly as Apply runs them (same planner,
// planning rates, pool and calibrated profiles), without handing the plan to
// the control loop: nothing changes. It returns the unplaced plan the change
// would serve; err is the reason Apply would refuse it (the admin API's 422),
// with the plan when there is one (a session that cannot be planned).
// Safe from any goroutine.
func (c *EmbeddedControl) DryRun(cfg *api.Config) (*api.Plan, error) {
	prev := c.served.Load()
	cfg, err := c.pipe.Fuse(cfg)
	if err != nil {
		return nil, err
	}
	planned, err := c.planChange(cfg, prev)
	if err != nil {
		// The plan the check refused, for the diff: the plan step again, as
		// planChange's first try runs it (planChange keeps no refused plan).
		plan, _ := c.pipe.Plan(replan.WithRates(cfg, c.ctl.PlanningRates(cfg)))
		return plan, err
	}
	return planned.Plan, nil
}

// PlanDiff is the answer to a dry run (PUT or DELETE
// /admin/sessions/{name}?dry_run=true, POST /admin/sessions/{name}:plan):
// the plan the change would serve against the running one. Costs are the
// plans' TotalCost (price units per hour, the config's hardware prices);
// machines are the plans' GroupPlan.Machines summed (fractional: occupancy).
type PlanDiff struct {
	DryRun  bool   `json:"dry_run"` // always true: nothing was changed
	Session string `json:"session"`
	// Version is the running config's version, unchanged by the dry run.
	Version uint64 `json:"version"`
	// WouldApply is false when the change would be refused; Error says why
	// (what a PUT would answer with 422).
	WouldApply bool           `json:"would_apply"`
	Error      string         `json:"error,omitempty"`
	CostBefore float64        `json:"cost_before"`
	CostAfter  float64        `json:"cost_after"`
	Hardware   []HardwareDiff `json:"hardware"`
	// Modules lists every module of the changed session and every other
	// module whose configs change.
	Modules []ModuleDiff `json:"modules"`
	// Attainment is each planned session's simulated SLO attainment under
	// the plan after the change, in [0, 1]: Poisson arrivals at the planned
	// rates, the gateway's dispatch, flush and admission
	// (AdminOptions.Served) on a virtual clock, bounded as the gateway's
	// burst check is (simulate.BurstDuration, simulate.BurstItems, seed 1).
	// Unplaced: machines that share a backend are not slowed here.
	Attainment map[string]float64 `json:"simulated_attainment,omitempty"`
}

// simulatedAttainment is Attainment for plan (nil without a plan to run)
// served as served says (its Policy, Flush and Admission).
func simulatedAttainment(plan *api.Plan, served simulate.Options) map[string]float64 {
	if plan == nil {
		return nil
	}
	if served.Policy == nil {
		served.Policy = dispatcher.TC{}
	}
	rep, err := simulate.Run(plan, simulate.Options{Policy: served.Policy, Flush: served.Flush, Admission: served.Admission,
		Arrival: "poisson", Duration: simulate.BurstDuration, MaxItems: simulate.BurstItems, Seed: 1})
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, sr := range rep.Sessions {
		if sr.Skipped == "" && sr.Requests > 0 {
			out[sr.Name] = math.Round(sr.SLOAttainment*10000) / 10000
		}
	}
	return out
}

// HardwareDiff is the machines of one hardware type before and after.
type HardwareDiff struct {
	Hardware string  `json:"hardware"`
	Before   float64 `json:"before"`
	After    float64 `json:"after"`
	Delta    float64 `json:"delta"`
}

// ModuleDiff is one module's config groups before and after; Error is the
// planner's reason when its session cannot be planned after the change.
type ModuleDiff struct {
	Session string       `json:"session"`
	Module  string       `json:"module"`
	Before  []ConfigView `json:"before"`
	After   []ConfigView `json:"after"`
	Error   string       `json:"error,omitempty"`
}

// ConfigView is one config group of a module plan: hardware, batch size,
// concurrency and machines (fractional).
type ConfigView struct {
	Hardware    string  `json:"hardware"`
	Batch       int     `json:"batch"`
	Concurrency int     `json:"concurrency"`
	Machines    float64 `json:"machines"`
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// diffPlans is the diff of after (the plan a change of session would serve)
// against before (the running plan).
func diffPlans(session string, before, after *api.Plan) PlanDiff {
	d := PlanDiff{DryRun: true, Session: session, Hardware: []HardwareDiff{}, Modules: []ModuleDiff{}}
	hw := map[string]*HardwareDiff{}
	type key struct{ s, m string }
	mods := map[key]*ModuleDiff{}
	var order []key
	errs := map[string]string{}
	walk := func(p *api.Plan, after bool) {
		if p == nil {
			return
		}
		if after {
			d.CostAfter = round2(p.TotalCost)
		} else {
			d.CostBefore = round2(p.TotalCost)
		}
		for _, sp := range p.Sessions {
			if after && sp.Error != "" {
				errs[sp.Name] = sp.Error
			}
			for _, mp := range sp.Modules {
				k := key{sp.Name, mp.Name}
				md := mods[k]
				if md == nil {
					md = &ModuleDiff{Session: sp.Name, Module: mp.Name, Before: []ConfigView{}, After: []ConfigView{}}
					mods[k] = md
					order = append(order, k)
				}
				for _, g := range mp.Configs {
					h := hw[g.Hardware]
					if h == nil {
						h = &HardwareDiff{Hardware: g.Hardware}
						hw[g.Hardware] = h
					}
					v := ConfigView{Hardware: g.Hardware, Batch: g.Batch, Concurrency: g.Concurrency, Machines: round2(g.Machines)}
					if after {
						h.After += g.Machines
						md.After = append(md.After, v)
					} else {
						h.Before += g.Machines
						md.Before = append(md.Before, v)
					}
				}
			}
		}
	}
	walk(before, false)
	walk(after, true)
	for _, h := range hw {
		h.Before, h.After = round2(h.Before), round2(h.After)
		h.Delta = round2(h.After - h.Before)
		d.Hardware = append(d.Hardware, *h)
	}
	sort.Slice(d.Hardware, func(i, j int) bool { return d.Hardware[i].Hardware < d.Hardware[j].Hardware })
	for _, k := range order {
		md := mods[k]
		if k.s == session || !slices.Equal(md.Before, md.After) {
			d.Modules = append(d.Modules, *md)
		}
	}
	if e, ok := errs[session]; ok {
		d.Modules = append(d.Modules, ModuleDiff{Session: session, Before: []ConfigView{}, After: []ConfigView{}, Error: e})
	}
	return d
}

// dryRun answers a dry run of the change that next (built from the running
// config of version) makes to session: 200 with the PlanDiff when it would
// go live, 422 with the PlanDiff and the reason when it would be refused. A
// gateway without a dry run (AdminOptions.DryRun nil: --consul, whose plans
// the cluster's re-planner makes) answers 501.
func (a *Admin) dryRun(ctx *fasthttp.RequestCtx, session string, version uint64, next *api.Config) {
	if a.opts.DryRun == nil {
		a.fail(ctx, &adminError{status: 501, msg: "dry runs are not available here: they need the gateway's own control loop (a gateway without --consul)"})
		return
	}
	if err := next.Validate(); err != nil {
		a.fail(ctx, err)
		return
	}
	plan, err := a.opts.DryRun(next)
	d := diffPlans(session, a.opts.Plan(), plan)
	d.Version = version
	d.Attainment = simulatedAttainment(plan, a.opts.Served)
	status := 200
	d.WouldApply = err == nil
	if err != nil {
		d.Error = fmt.Sprintf("%v: %v", ErrRejected, err)
		status = 422
	}
	a.logChange("session change planned (dry run)", session, err)
	a.setVersion(ctx, version)
	a.writeJSON(ctx, status, d)
}
