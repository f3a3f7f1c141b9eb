package control

import "github.com/piccolo-serving/piccolo/api"

// PlaceStatic places a plan on a static backends list (a gateway without
// membership): when no group names backends yet and members hold every device
// the plan needs, Place's packing (full machines on a device each, fractional
// machines of different modules sharing devices up to occupancy 1), so the
// gateway runs the plan on the devices the planner's cost buys; otherwise
// (a short list, or a plan already placed) PlaceWith RoundRobin, whose groups
// keep the backends they name and whose machines share backends when the list
// is short. prev (may be nil) is the placed plan being replaced: Place keeps
// a module's machines on the devices it ran on there (its model is loaded).
func PlaceStatic(plan *api.Plan, members []Member, prev *api.Plan) (*api.Plan, Shortfall, error) {
	if plan != nil && !namesBackends(plan) {
		if placed, short, err := Place(plan, members, prev); err == nil && short.Err() == nil {
			return placed, Shortfall{}, nil
		}
	}
	return PlaceWith(plan, members, nil, PlaceOptions{RoundRobin: true})
}

func namesBackends(plan *api.Plan) bool {
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				if len(g.Backends) > 0 {
					return true
				}
			}
		}
	}
	return false
}
