package simulate

import (
	"errors"
	"fmt"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

// Utilizations are the maximum utilisations PlanForBursts tries, in order.
var Utilizations = []float64{0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5}

// The burst check's simulation: at most BurstDuration of virtual time and at
// most BurstItems module items (Options.MaxItems), whichever is shorter, so
// its work is bounded by items, not by seconds of arrivals at the planned
// rate (docs/traffic.md, "Planning time and the rate").
const (
	BurstDuration = 60 * time.Second
	BurstItems    = 20000
)

// BurstWindow is how long arrivals at p's planned module rates take to make
// items module items (a request through k modules makes k): items / Σ the
// planned sessions' module rates, at least a millisecond; an hour when
// nothing is planned to arrive.
func BurstWindow(p *api.Plan, items int) time.Duration {
	rate := 0.0
	for _, sp := range p.Sessions {
		if sp.Error != "" {
			continue
		}
		for _, mp := range sp.Modules {
			rate += mp.Rate
		}
	}
	if !(rate > 0) {
		return time.Hour
	}
	return max(time.Millisecond, time.Duration(float64(items)/rate*float64(time.Second)))
}

// PlanForBursts plans cfg with opts at decreasing maximum utilisation (Utilizations)
// until a simulation of the plan under Poisson arrivals at the planned rates (60 s
// of virtual time or BurstItems items, whichever is shorter; the given seed, TC dispatch) meets every session's SLO for at
// least target of its requests — the burstiness check InferLine makes by
// simulation. Planning at 100% of the profiled throughput leaves queues to grow
// without bound under random arrivals; a fixed headroom is either wasteful or too
// little depending on the plan's slack. It returns the cheapest plan that passes,
// its utilisation, and its simulated report; when none passes, the last (most
// headroom) with an error saying so. A plan in which no session could be
// planned is returned at once, without a report, with the planner's error.
// opts.MaxUtilization is ignored.
func PlanForBursts(cfg *api.Config, opts planner.Options, target float64, seed uint64) (*api.Plan, *Report, error) {
	if !(target > 0 && target <= 1) {
		return nil, nil, fmt.Errorf("burst target %v: must be in (0, 1]", target)
	}
	load := Options{Policy: dispatcher.TC{}, Arrival: "poisson", Duration: BurstDuration, MaxItems: BurstItems, Seed: seed}
	plan, rep, _, passed, err := search(len(Utilizations), func(i int) (*api.Plan, error) {
		opts.MaxUtilization = Utilizations[i]
		return planner.Plan(cfg, opts)
	}, load, target, nil)
	if !passed && rep != nil {
		err = errors.Join(err, fmt.Errorf("no plan down to utilisation %.2f meets the SLO for %.2f%% of simulated Poisson requests", Utilizations[len(Utilizations)-1], 100*target))
	}
	return plan, rep, err
}

// search is the headroom search of PlanForBursts and PlanForTrace: it plans the
// candidates in order (plan(i), i < n, from least headroom to most), simulates each
// under load, and returns the first whose simulation meets target for every
// session, its report and index, and passed. When none does it returns the last,
// with its report, and passed false. A candidate in which no session could be
// planned ends the search at once: it is returned without a report, with the
// planner's error; a nil plan likewise. err is otherwise the planner's error for
// the plan returned (some of its sessions could not be planned), or the
// simulator's (then without a plan).
//
// held, when not nil, is a further check a candidate before the last must
// pass (the trace searches' margin, heldOut): the last candidate is the most
// headroom there is, and passed says whether it meets target under load.
func search(n int, plan func(i int) (*api.Plan, error), load Options, target float64, held *heldOut) (p *api.Plan, rep *Report, i int, passed bool, err error) {
	for i = range n {
		var planErr error
		p, planErr = plan(i)
		if p == nil || !anyPlanned(p) { // nothing to simulate: the sessions' errors say why
			return p, nil, i, false, planErr
		}
		r, err := Run(p, load)
		if err != nil {
			return nil, nil, i, false, fmt.Errorf("simulating the plan at utilisation %.2f: %w", p.MaxUtilization, err)
		}
		rep = r
		ok := meets(r, target)
		if ok && held != nil && i < n-1 {
			if ok, err = held.meets(p, target); err != nil {
				return nil, nil, i, false, err
			}
		}
		if ok || i == n-1 {
			return p, rep, i, meets(r, target), planErr
		}
	}
	return nil, nil, 0, false, errors.New("search: no candidate")
}

func anyPlanned(p *api.Plan) bool {
	for _, s := range p.Sessions {
		if s.Error == "" {
			return true
		}
	}
	return false
}

func meets(r *Report, target float64) bool {
	for _, s := range r.Sessions {
		if s.Skipped != "" || s.Requests == 0 {
			continue
		}
		if s.SLOAttainment < target {
			return false
		}
	}
	return true
}
