package replan

import (
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
)

// fitTries bounds the planner runs fitPool makes for one re-plan.
const fitTries = 6

// fitPool makes the planner's plan p of cfg fit the members: when placing p
// would need more devices of a hardware type than the pool has (the planner
// plans per type at its price, not knowing how many devices each type has),
// it plans again without that type for one model at a time (the model's
// profiles on it left out of cfg) and keeps the candidate that misses the
// fewest devices, then the cheapest, as long as it misses fewer than the
// plan before it; greedily, at most fitTries planner runs. A candidate that
// fails a session p planned is not taken. With every device 1.6× slower
// than profiled, the calibrated plan of the demo's paper-chain moves m2 to
// v100 and needs 9–10 v100 where the pool lists 6; placed, machines share
// devices and requests fail late (docs/calibration.md, "Pool-aware
// planning"). Returns p itself when it fits or nothing fits better; the
// plan's costs are its true costs (no price is changed).
//
// It records whether the planner's plan missed devices, or used every
// device of a type (Controller.fitted): while it did, a membership change
// plans again, as the pool that grew may
// now hold it (members join one by one, and the first join of a new type
// would otherwise fix the plan for the pool as it was then).
func (c *Controller) fitPool(cfg *api.Config, p *api.Plan, err error) (*api.Plan, error) {
	c.fitted = false
	if len(c.members) == 0 {
		return p, err
	}
	missing, binds := c.placedShort(p)
	if missing == 0 {
		// A plan the planner fitted to the pool itself (Options.Pool, as
		// PlanForServing plans) misses nothing but uses every device of a
		// type: a pool that grows may hold a cheaper plan, so a membership
		// change plans again too.
		c.fitted = binds
		return p, err
	}
	c.fitted = true
	tries := 0
	for missing > 0 && tries < fitTries {
		short := c.shortTypes(p)
		var best *api.Plan
		var bestErr error
		var bestCfg *api.Config
		bestMissing := missing
		for _, mh := range usedOn(p, short) {
			if tries == fitTries {
				break
			}
			cand := withoutProfile(cfg, mh[0], mh[1])
			if cand == nil {
				continue
			}
			tries++
			q, qerr := c.o.Plan(cand)
			if q == nil || FailsMore(q, p) {
				continue
			}
			m := c.missing(q)
			if m < bestMissing || m == bestMissing && best != nil && q.TotalCost < best.TotalCost {
				best, bestErr, bestCfg, bestMissing = q, qerr, cand, m
			}
		}
		if best == nil {
			break
		}
		p, err, cfg, missing = best, bestErr, bestCfg, bestMissing
	}
	return p, err
}

// missing is how many devices placing p on the members misses (packed
// placement: the count of devices each type needs does not depend on the
// placement options, and Options.Place stays called once a decision).
func (c *Controller) missing(p *api.Plan) int {
	m, _ := c.placedShort(p)
	return m
}

// placedShort is missing, and whether p uses every device of a type it
// runs on (the pool binds it).
func (c *Controller) placedShort(p *api.Plan) (missing int, binds bool) {
	_, short, err := placement.Place(p, c.members, nil, placement.Options{})
	if err != nil {
		return 1 << 30, false
	}
	for _, h := range short.Hardware {
		if h.Needed > 0 && h.Needed >= h.Present {
			binds = true
		}
	}
	return short.Missing(), binds
}

// shortTypes returns the hardware types p needs more devices of than the
// members have.
func (c *Controller) shortTypes(p *api.Plan) map[string]bool {
	_, short, err := placement.Place(p, c.members, nil, placement.Options{})
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for _, h := range short.Hardware {
		if h.Needed > h.Present {
			out[h.Hardware] = true
		}
	}
	return out
}

// usedOn lists the (model, hardware) pairs of p's groups on the hardware
// types in hw, each once, in plan order.
func usedOn(p *api.Plan, hw map[string]bool) [][2]string {
	var out [][2]string
	seen := map[[2]string]bool{}
	for _, sp := range p.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				k := [2]string{mp.Model, g.Hardware}
				if hw[g.Hardware] && !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// withoutProfile returns a copy of cfg without model's profile on hardware;
// nil when cfg has none or it is the model's only one.
func withoutProfile(cfg *api.Config, model, hardware string) *api.Config {
	out := *cfg
	out.Profiles = make([]api.Profile, 0, len(cfg.Profiles))
	found, others := false, false
	for _, pr := range cfg.Profiles {
		switch {
		case pr.Model == model && pr.Hardware == hardware:
			found = true
			continue
		case pr.Model == model:
			others = true
		}
		out.Profiles = append(out.Profiles, pr)
	}
	if !found || !others {
		return nil
	}
	return &out
}

// FailsMore reports whether q leaves a session unplanned that p planned.
func FailsMore(q, p *api.Plan) bool {
	ok := map[string]bool{}
	for _, sp := range p.Sessions {
		ok[sp.Name] = sp.Error == ""
	}
	for _, sp := range q.Sessions {
		if sp.Error != "" && ok[sp.Name] {
			return true
		}
	}
	return false
}
