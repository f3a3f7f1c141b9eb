package placement

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// TestPlaceStaticPacks: with backends enough for the packing, a static list is
// placed as Place packs (two fractions of different modules share a device;
// the full machine has one of its own); with too few, round-robin shares.
func TestPlaceStaticPacks(t *testing.T) {
	plan := &api.Plan{Sessions: []api.SessionPlan{
		{Name: "a", Modules: []api.ModulePlan{{Name: "m", Configs: []api.GroupPlan{{Hardware: "g", Machines: 1}}}}},
		{Name: "b", Modules: []api.ModulePlan{{Name: "m", Configs: []api.GroupPlan{{Hardware: "g", Machines: 0.5}}}}},
		{Name: "c", Modules: []api.ModulePlan{{Name: "m", Configs: []api.GroupPlan{{Hardware: "g", Machines: 0.4}}}}},
	}}
	two := []Member{{"g-0", "g"}, {"g-1", "g"}}
	placed, short, err := Place(plan, two, nil, Options{Static: true})
	if err != nil || short.Shared != 0 {
		t.Fatalf("err %v, shared %d", err, short.Shared)
	}
	full := placed.Sessions[0].Modules[0].Configs[0].Backends
	b := placed.Sessions[1].Modules[0].Configs[0].Backends
	c := placed.Sessions[2].Modules[0].Configs[0].Backends
	if len(full) != 1 || len(b) != 1 || len(c) != 1 || b[0] != c[0] || full[0] == b[0] {
		t.Errorf("placed a:%v b:%v c:%v; want b and c sharing the device a does not hold", full, b, c)
	}
	// Round-robin on the same two would put a and c on one device (1.4).
	_, short, err = Place(plan, two[:1], nil, Options{Static: true})
	if err != nil || short.Shared != 2 {
		t.Errorf("one backend for 3 machines: err %v, shared %d; want round-robin sharing 2", err, short.Shared)
	}
}
