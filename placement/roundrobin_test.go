package placement

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPlaceRoundRobinGivesEachMachineABackendWhileAnyIsFree: the static
// gateway's placement takes the next member of the hardware type for every
// machine, fractional ones too, in plan order and members order.
func TestPlaceRoundRobinGivesEachMachineABackendWhileAnyIsFree(t *testing.T) {
	plan := testPlan([]float64{2.4, 0.3, 0.3})
	// Members in config order, not sorted: the rotation follows the list.
	members := []Member{{ID: "z", Hardware: "v100"}, {ID: "a", Hardware: "v100"}, {ID: "m", Hardware: "v100"},
		{ID: "b", Hardware: "v100"}, {ID: "c", Hardware: "v100"}}
	placed, short, err := Place(plan, members, nil, Options{RoundRobin: true})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, mp := range placed.Sessions[0].Modules {
		got = append(got, mp.Configs[0].Backends)
	}
	want := [][]string{{"z", "a", "m"}, {"b"}, {"c"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backends per module (-want +got):\n%s", diff)
	}
	if short.Shared != 0 || short.Err() != nil {
		t.Errorf("shortfall %+v with enough members; want none", short)
	}
	if plan.Sessions[0].Modules[0].Configs[0].Backends != nil {
		t.Error("Place modified its input plan")
	}
}

// TestPlaceRoundRobinSharesWhenShort: with fewer members than machines the
// rotation wraps, every machine still gets a backend (nothing is scaled down)
// and Shared counts the machines beyond the pool, which the gateway logs.
func TestPlaceRoundRobinSharesWhenShort(t *testing.T) {
	plan := testPlan([]float64{2, 1.5, 1})
	placed, short, err := Place(plan, pool("v100", 2), nil, Options{RoundRobin: true})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, mp := range placed.Sessions[0].Modules {
		got = append(got, mp.Configs[0].Backends)
		if mp.Configs[0].Machines != plan.Sessions[0].Modules[len(got)-1].Configs[0].Machines {
			t.Errorf("module %s: machines changed to %v; round-robin must not scale groups", mp.Name, mp.Configs[0].Machines)
		}
	}
	want := [][]string{{"v100-0", "v100-1"}, {"v100-0", "v100-1"}, {"v100-0"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backends per module (-want +got):\n%s", diff)
	}
	if short.Shared != 3 {
		t.Errorf("Shared %d, want 3 (5 machines on 2 backends)", short.Shared)
	}
}

// TestPlaceRoundRobinKeepsPlacedGroupsAndNamesMissingHardware: a group that
// already lists backends (placed by the control loop) keeps them; a hardware
// type without any member is an error naming the module and what there is.
func TestPlaceRoundRobinKeepsPlacedGroupsAndNamesMissingHardware(t *testing.T) {
	plan := testPlan([]float64{1, 1})
	plan.Sessions[0].Modules[0].Configs[0].Backends = []string{"elsewhere"}
	placed, short, err := Place(plan, pool("v100", 1), nil, Options{RoundRobin: true})
	if err != nil {
		t.Fatal(err)
	}
	if b := placed.Sessions[0].Modules[0].Configs[0].Backends; !cmp.Equal(b, []string{"elsewhere"}) {
		t.Errorf("placed group's backends %v, want [elsewhere] kept", b)
	}
	if b := placed.Sessions[0].Modules[1].Configs[0].Backends; !cmp.Equal(b, []string{"v100-0"}) || short.Shared != 0 {
		t.Errorf("unplaced group got %v (shared %d), want [v100-0] and none shared", b, short.Shared)
	}

	_, _, err = Place(testPlan([]float64{1}, "t4"), pool("v100", 2), nil, Options{RoundRobin: true})
	if err == nil || !strings.Contains(err.Error(), `module "m0"`) || !strings.Contains(err.Error(), `hardware "t4"`) ||
		!strings.Contains(err.Error(), "v100: v100-0, v100-1") {
		t.Errorf("no t4 member: %v; want an error naming module m0, hardware t4 and the v100 members", err)
	}
	if _, _, err := Place(nil, nil, nil, Options{RoundRobin: true}); err == nil {
		t.Error("a nil plan was accepted")
	}
}
