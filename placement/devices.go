package placement

import (
	"fmt"

	"github.com/piccolo-serving/piccolo/api"
)

// provision places plan (Options.Provision) by packing on exactly as many
// devices as it needs, named "<hardware>-<i>". A plan whose groups already name
// backends is returned as it is. The plan's cost (fractional machines × price)
// is what the planner minimises; the devices are what that cost buys once
// placed (Devices counts them).
func provision(plan *api.Plan) (*api.Plan, Shortfall, error) {
	if plan == nil {
		return nil, Shortfall{}, fmt.Errorf("placement: no plan")
	}
	if Devices(plan) > 0 {
		return plan, Shortfall{}, nil
	}
	// First on no device: the shortfall says how many of each hardware type
	// the packing needs; then on that many.
	_, short, err := pack(plan, nil, nil, nil, false)
	if err != nil {
		return nil, short, err
	}
	var members []Member
	for _, h := range short.Hardware {
		for i := range h.Needed {
			members = append(members, Member{ID: fmt.Sprintf("%s-%d", h.Hardware, i), Hardware: h.Hardware})
		}
	}
	placed, short, err := pack(plan, members, nil, nil, false)
	if err != nil {
		return nil, short, err
	}
	if err := short.Err(); err != nil {
		return nil, short, fmt.Errorf("placement on the %d devices it asked for: %w", len(members), err)
	}
	return placed, short, nil
}

// Devices returns the number of distinct backends (devices) the planned
// sessions of a placed plan name.
func Devices(plan *api.Plan) int {
	n := 0
	for _, k := range DevicesByHardware(plan) {
		n += k
	}
	return n
}

// DevicesByHardware counts the distinct backends the planned sessions of a
// placed plan name, per hardware type.
func DevicesByHardware(placed *api.Plan) map[string]int {
	seen := map[string]bool{}
	n := map[string]int{}
	for m := range placed.Machines() {
		if m.Session.Error == "" && !seen[m.Backend] {
			seen[m.Backend] = true
			n[m.Group.Hardware]++
		}
	}
	return n
}
