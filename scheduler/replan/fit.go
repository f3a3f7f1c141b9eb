package replan

import (
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
)

// fitPool notes whether the planner's plan p of cfg missed devices of the
// members' pool or used every device of a type (Controller.fitted): while
// it did, a membership change plans again, as the pool that grew may now
// hold a cheaper plan (members join one by one, and the first join of a new
// type would otherwise fix the plan for the pool as it was then). Fitting
// the plan to the pool is the planner's (serving.Plan: the members are its
// backends, their counts per hardware type its pool; planningConfig), so
// nothing here runs the planner again; p and err are returned as they are.
func (c *Controller) fitPool(p *api.Plan, err error) (*api.Plan, error) {
	c.fitted = false
	if len(c.members) == 0 {
		return p, err
	}
	missing, binds := c.placedShort(p)
	c.fitted = missing > 0 || binds
	return p, err
}

// placedShort is how many devices placing p on the members misses, and
// whether p uses every device of a type it runs on (the pool binds it).
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
