package placement

import "github.com/piccolo-serving/piccolo/api"

// placeStatic places a plan on a static backends list (a gateway without
// membership): when no group names backends yet and members hold every device
// the plan needs, Place's packing (full machines on a device each, fractional
// machines of different modules sharing devices up to occupancy 1), so the
// gateway runs the plan on the devices the planner's cost buys, with the
// fractions spread over the members packing leaves idle (packSpread); otherwise
// (a short list, or a plan already placed) Options.RoundRobin's placement, whose groups
// keep the backends they name and whose machines share backends when the list
// is short. prev (may be nil) is the placed plan being replaced: Place keeps
// a module's machines on the devices it ran on there (its model is loaded).
//
// The Shortfall is the packing's (what the plan needs vs the pool) with
// Shared, the machines round-robin made share a backend, when it fell back.
func placeStatic(plan *api.Plan, members []Member, prev *api.Plan, avoid *interference, chains bool) (*api.Plan, Shortfall, error) {
	var short Shortfall
	if plan != nil && !plan.Placed() {
		placed, s, err := packSpread(plan, members, prev, avoid, chains)
		if err == nil && s.Err() == nil {
			return placed, s, nil
		}
		if err == nil {
			short = s
		}
	}
	rr, rs, err := placeRoundRobin(plan, members)
	short.Shared = rs.Shared
	return rr, short, err
}

// Members are a static backends list as placement members.
func Members(bs []api.Backend) []Member {
	out := make([]Member, len(bs))
	for i, b := range bs {
		out[i] = Member{ID: b.ID, Hardware: b.Hardware}
	}
	return out
}
