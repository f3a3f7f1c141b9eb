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

// BurstCheck is the simulation PlanForBursts checks each candidate plan with.
type BurstCheck struct {
	// Target is the share of each session's simulated requests that must meet
	// its SLO, in (0, 1]. A refused request counts against it.
	Target float64
	// Seed seeds the Poisson arrivals.
	Seed uint64
	// Admission simulates the plan as the live gateway serves it
	// (Options.Admission): each item's expiry is its request's deadline less
	// the later modules' reserve, and an item the queues say would finish
	// too late is refused at once, counted as a miss. False: the paper's
	// dispatcher, in which an item's deadline is its module's budget and
	// everything is admitted. The two differ most where the budget split
	// leaves a small module no slack: under the paper's semantics one
	// Poisson bunch makes its items miss at every cap, so the search lowers
	// the cap for misses that headroom does not remove (docs/planner.md,
	// "The burst check: a cap per session, the gateway's semantics").
	Admission bool
	// Plan plans each candidate (nil: planner.Plan); serving.Plan passes its
	// planner for the hardware types the pool has.
	Plan func(*api.Config, planner.Options) (*api.Plan, error)
	// Dispatch is the dispatch the plan is served with (nil: TC): the
	// baselines of Table III are served round-robin, which needs more
	// headroom than TC (InferLine's chain meets 88% at 0.9 under RR, 100%
	// under TC).
	Dispatch dispatcher.Policy
	// Flush is the flush rule the plan is served with (nil: FlushDeadline,
	// the simulator's default and the paper's). The gateway passes its own
	// (--flush, idle by default, serving.DefaultHeadroom): the idle flush
	// sends partial batches to idle machines, which costs device time the
	// deadline flush does not spend (docs/evaluation.md, "Every policy live
	// beside its simulation").
	Flush dispatcher.Flush
}

// PlanForBursts plans cfg with opts at decreasing maximum utilisation
// (Utilizations), each session on its own: it plans every session at the
// first cap, simulates the plan under Poisson arrivals at the planned rates
// (60 s of virtual time or BurstItems items, whichever is shorter; check's
// seed, semantics and dispatch, TC by default), and while a session meets its SLO for
// less than check.Target of its requests, plans that session again at the
// next cap (planner.Options.SessionUtilization), the others keeping theirs —
// the burstiness check InferLine makes by simulation. Planning at 100% of the
// profiled throughput leaves queues to grow without bound under random
// arrivals; a fixed headroom is either wasteful or too little depending on
// the plan's slack, and one cap for every session makes all of them pay for
// the one with the least slack. The plan's MaxUtilization is the highest
// session cap; a session planned lower carries its own
// (api.SessionPlan.MaxUtilization).
//
// It returns the plan in which every session passes, with its simulated
// report; when a session fails even at the last cap, the plan with that
// session at the last cap (most headroom), with an error saying so. A plan in
// which no session could be planned is returned at once, without a report,
// with the planner's error. opts.MaxUtilization and opts.SessionUtilization
// are ignored. It plans and simulates at most len(Utilizations) times: each
// round lowers every failing session one cap.
func PlanForBursts(cfg *api.Config, opts planner.Options, check BurstCheck) (*api.Plan, *Report, error) {
	target := check.Target
	if !(target > 0 && target <= 1) {
		return nil, nil, fmt.Errorf("burst target %v: must be in (0, 1]", target)
	}
	var pol dispatcher.Policy = dispatcher.TC{}
	if check.Dispatch != nil {
		pol = check.Dispatch
	}
	load := Options{Policy: pol, Flush: check.Flush, Arrival: "poisson", Duration: BurstDuration, MaxItems: BurstItems, Seed: check.Seed, Admission: check.Admission}
	pl := check.Plan
	if pl == nil {
		pl = planner.Plan
	}
	at := map[string]int{} // session → index into Utilizations; absent: 0
	last := len(Utilizations) - 1
	for {
		opts.MaxUtilization, opts.SessionUtilization = sessionCaps(cfg, at)
		p, planErr := pl(cfg, opts)
		if p == nil || !anyPlanned(p) { // nothing to simulate: the sessions' errors say why
			return p, nil, planErr
		}
		r, err := Run(p, load)
		if err != nil {
			return nil, nil, fmt.Errorf("simulating the plan at utilisation %.2f: %w", p.MaxUtilization, err)
		}
		var lowered bool
		var failed []string
		for _, s := range r.Sessions {
			if s.Skipped != "" || s.Requests == 0 || s.SLOAttainment >= target {
				continue
			}
			if at[s.Name] < last {
				at[s.Name]++
				lowered = true
			} else {
				failed = append(failed, s.Name)
			}
		}
		if !lowered {
			if len(failed) > 0 {
				planErr = errors.Join(planErr, fmt.Errorf("sessions %v: no plan down to utilisation %.2f meets the SLO for %.2f%% of simulated Poisson requests", failed, Utilizations[last], 100*target))
			}
			return p, r, planErr
		}
	}
}

// sessionCaps returns the planner's caps for the sessions' indexes into
// Utilizations in at (planner.SplitCaps).
func sessionCaps(cfg *api.Config, at map[string]int) (float64, map[string]float64) {
	caps := make(map[string]float64, len(cfg.Sessions))
	for _, s := range cfg.Sessions {
		caps[s.Name] = Utilizations[at[s.Name]]
	}
	return planner.SplitCaps(caps)
}

// search is the headroom search of PlanForTrace: it plans the
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
