package placement

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// testPlan builds a one-session plan whose module i has one group of machines[i]
// on hardware hw[i] (or "v100").
func testPlan(machines []float64, hw ...string) *api.Plan {
	sp := api.SessionPlan{Name: "s"}
	for i, m := range machines {
		h := "v100"
		if i < len(hw) {
			h = hw[i]
		}
		sp.Modules = append(sp.Modules, api.ModulePlan{Name: fmt.Sprintf("m%d", i), Model: fmt.Sprintf("model%d", i),
			Configs: []api.GroupPlan{{Hardware: h, Price: 1, Batch: 4, Concurrency: 1, DurationMs: 10, Throughput: 400,
				Machines: m, Rate: 400 * m, Cost: m}}})
	}
	return &api.Plan{Policy: "test", Sessions: []api.SessionPlan{sp}}
}

func pool(hw string, n int) []Member {
	var out []Member
	for i := range n {
		out = append(out, Member{ID: fmt.Sprintf("%s-%d", hw, i), Hardware: hw})
	}
	return out
}

// occupancy returns every backend's summed occupancy in a placed plan and fails
// t if a group's backends do not match its machines (one per machine) or name
// a backend not in members or of another hardware type.
func occupancy(t *testing.T, p *api.Plan, members []Member) map[string]float64 {
	t.Helper()
	hwOf := map[string]string{}
	for _, m := range members {
		hwOf[m.ID] = m.Hardware
	}
	occ := map[string]float64{}
	for _, sp := range p.Sessions {
		for _, mp := range sp.Modules {
			for gi, g := range mp.Configs {
				n := int(math.Ceil(g.Machines - 1e-9))
				if len(g.Backends) != n {
					t.Fatalf("%s/%s group %d: %d backends for %v machines, want %d", sp.Name, mp.Name, gi, len(g.Backends), g.Machines, n)
				}
				for i, id := range g.Backends {
					if hwOf[id] != g.Hardware {
						t.Fatalf("%s/%s group %d: backend %q has hardware %q, group wants %q", sp.Name, mp.Name, gi, id, hwOf[id], g.Hardware)
					}
					o := 1.0
					if i == n-1 {
						o = g.Machines - float64(n-1)
					}
					occ[id] += o
				}
			}
		}
	}
	for id, o := range occ {
		if o > 1+1e-9 {
			t.Errorf("backend %q: occupancy %v > 1", id, o)
		}
	}
	return occ
}

func TestPlacePacksFractionsFirstFitDecreasing(t *testing.T) {
	plan := testPlan([]float64{2, 0.3, 0.6, 0.4, 0.5})
	members := pool("v100", 5)
	placed, short, err := Place(plan, members, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	occ := occupancy(t, placed, members)
	// Two full machines, then FFD: {0.6, 0.4} and {0.5, 0.3}: four devices.
	want := Shortfall{Hardware: []HardwareUse{{Hardware: "v100", Needed: 4, Present: 5, Used: 4, Idle: []string{"v100-4"}}}}
	if d := cmp.Diff(want, short); d != "" {
		t.Errorf("shortfall (-want +got):\n%s", d)
	}
	if short.Err() != nil {
		t.Errorf("Err() = %v, want nil", short.Err())
	}
	var got []float64
	for _, o := range occ {
		got = append(got, math.Round(o*10)/10)
	}
	sort.Float64s(got)
	if d := cmp.Diff([]float64{0.8, 1, 1, 1}, got); d != "" {
		t.Errorf("device occupancies (-want +got):\n%s", d)
	}
	if d := cmp.Diff(plan, testPlan([]float64{2, 0.3, 0.6, 0.4, 0.5})); d != "" {
		t.Errorf("Place modified its input plan:\n%s", d)
	}
	if placed.TotalCost != 3.8 && math.Abs(placed.TotalCost-3.8) > 1e-9 {
		t.Errorf("placed total cost %v, want 3.8", placed.TotalCost)
	}
}

func TestPlaceGroupOf2Point4MachinesGetsThreeBackendsLastShared(t *testing.T) {
	plan := testPlan([]float64{2.4, 0.5})
	members := pool("v100", 3)
	placed, _, err := Place(plan, members, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := placed.Sessions[0].Modules[0].Configs[0].Backends, placed.Sessions[0].Modules[1].Configs[0].Backends
	if len(a) != 3 || len(b) != 1 || a[2] != b[0] || a[0] == a[1] || a[0] == a[2] || a[1] == a[2] {
		t.Errorf("backends %v and %v: want 3 distinct for 2.4 machines, the last shared with the 0.5 machine", a, b)
	}
}

func TestPlaceIsStableAcrossReplans(t *testing.T) {
	members := pool("v100", 8)
	first, _, err := Place(testPlan([]float64{1, 2, 0.5, 0.3}), members, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// m0 grows, m1 shrinks, m3 grows (still fitting beside m2): every module
	// keeps what it had, as far as it still needs it.
	second, _, err := Place(testPlan([]float64{2, 1, 0.5, 0.5}), members, first, Options{})
	if err != nil {
		t.Fatal(err)
	}
	occupancy(t, second, members)
	for mi, mp := range second.Sessions[0].Modules {
		was := first.Sessions[0].Modules[mi].Configs[0].Backends
		now := mp.Configs[0].Backends
		keep := min(len(was), len(now))
		for _, id := range was[:keep] {
			if !contains(now, id) {
				t.Errorf("module %s: was on %v, now %v: lost %q although it still needs %d machines", mp.Name, was, now, id, len(now))
			}
		}
	}
	// The same plan again places identically.
	third, _, _ := Place(testPlan([]float64{2, 1, 0.5, 0.5}), members, second, Options{})
	if d := cmp.Diff(second, third); d != "" {
		t.Errorf("re-placing the same plan moved machines (-before +after):\n%s", d)
	}
}

func TestPlaceExcludesDepartedBackend(t *testing.T) {
	members := pool("v100", 4)
	first, _, _ := Place(testPlan([]float64{1, 1, 0.5, 0.5}), members, nil, Options{})
	gone := first.Sessions[0].Modules[1].Configs[0].Backends[0]
	var left []Member
	for _, m := range members {
		if m.ID != gone {
			left = append(left, m)
		}
	}
	second, short, err := Place(testPlan([]float64{1, 1, 0.5, 0.5}), left, first, Options{})
	if err != nil {
		t.Fatal(err)
	}
	occupancy(t, second, left) // fails if gone is still named
	if short.Err() != nil {
		t.Errorf("3 devices suffice for 1+1+0.5+0.5, got %v", short.Err())
	}
	for _, mi := range []int{0, 2, 3} {
		if d := cmp.Diff(first.Sessions[0].Modules[mi].Configs[0].Backends, second.Sessions[0].Modules[mi].Configs[0].Backends); d != "" {
			t.Errorf("module m%d moved although its backend stayed:\n%s", mi, d)
		}
	}
}

func TestPlaceShortfall(t *testing.T) {
	// v100: 3 full + 0.5 + 0.5 on 2 devices; t4: a module with no t4 at all.
	plan := testPlan([]float64{3, 0.5, 0.5, 1}, "v100", "v100", "v100", "t4")
	members := pool("v100", 2)
	placed, short, err := Place(plan, members, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []HardwareUse{
		{Hardware: "t4", Needed: 1, Present: 0},
		{Hardware: "v100", Needed: 4, Present: 2, Used: 2},
	}
	if d := cmp.Diff(want, short.Hardware); d != "" {
		t.Errorf("hardware use (-want +got):\n%s", d)
	}
	if short.Missing() != 3 || !errors.Is(short.Err(), ErrShortfall) {
		t.Errorf("Missing() = %d, Err() = %v: want 3 and ErrShortfall", short.Missing(), short.Err())
	}
	// One machine per module first: m0 gets one device, m1 and m2 share the
	// other, t4 has none.
	wantMods := []ModuleShortfall{
		{Session: "s", Module: "m0", Hardware: "v100", Machines: 3, Placed: 1},
		{Session: "s", Module: "m3", Hardware: "t4", Machines: 1},
	}
	if d := cmp.Diff(wantMods, short.Modules); d != "" {
		t.Errorf("module shortfall (-want +got):\n%s", d)
	}
	sp := placed.Sessions[0]
	if sp.Error == "" || len(sp.Modules) != 0 || placed.TotalCost != 0 {
		t.Errorf("session with a module left without backends: error %q, %d modules, cost %v; want an under-provisioned error, none, 0", sp.Error, len(sp.Modules), placed.TotalCost)
	}

	// Without the t4 module the session is served: m0 scaled to 1 of 3 machines.
	plan = testPlan([]float64{3, 0.5, 0.5})
	placed, _, _ = Place(plan, members, nil, Options{})
	occupancy(t, placed, members)
	if placed.Sessions[0].Error != "" {
		t.Fatalf("session not served: %s", placed.Sessions[0].Error)
	}
	g := placed.Sessions[0].Modules[0].Configs[0]
	if g.Machines != 1 || math.Abs(g.Rate-400) > 1e-9 || math.Abs(g.Cost-1) > 1e-9 {
		t.Errorf("scaled group: machines %v rate %v cost %v; want 1, 400, 1", g.Machines, g.Rate, g.Cost)
	}
	if math.Abs(placed.TotalCost-2) > 1e-9 {
		t.Errorf("placed total cost %v, want 2 (1 + 0.5 + 0.5)", placed.TotalCost)
	}
}

func TestPlaceErrors(t *testing.T) {
	for name, c := range map[string]struct {
		plan    *api.Plan
		members []Member
	}{
		"nil plan":       {nil, pool("v100", 1)},
		"no id":          {testPlan([]float64{1}), []Member{{Hardware: "v100"}}},
		"no hardware":    {testPlan([]float64{1}), []Member{{ID: "a"}}},
		"duplicate id":   {testPlan([]float64{1}), []Member{{ID: "a", Hardware: "v100"}, {ID: "a", Hardware: "t4"}}},
		"NaN machines":   {testPlan([]float64{math.NaN()}), pool("v100", 1)},
		"negative count": {testPlan([]float64{-1}), pool("v100", 1)},
	} {
		if p, _, err := Place(c.plan, c.members, nil, Options{}); err == nil || p != nil {
			t.Errorf("%s: plan %v, error %v; want no plan and an error", name, p != nil, err)
		}
	}
}

// TestPlaceProperty plans random workloads and places them on pools of random
// size: occupancy never exceeds 1, every machine has a backend of its hardware
// type, and when the pool has what Shortfall says is needed nothing is short.
func TestPlaceProperty(t *testing.T) {
	cfgs := planner.GenerateWorkloads(7, 60, planner.DefaultWorkloadSpec)
	// Several sessions in one plan, so modules of different sessions share devices.
	for i := 0; i+3 <= len(cfgs); i += 3 {
		var plan api.Plan
		for _, c := range cfgs[i : i+3] {
			p, _ := planner.Plan(c, planner.Options{})
			if p == nil {
				t.Fatalf("workload %d: no plan", i)
			}
			plan.Sessions = append(plan.Sessions, p.Sessions...)
		}
		_, need, err := Place(&plan, nil, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var members []Member
		for _, h := range need.Hardware {
			members = append(members, pool(h.Hardware, h.Needed)...)
		}
		placed, short, err := Place(&plan, members, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		occupancy(t, placed, members)
		if short.Err() != nil {
			t.Errorf("workloads %d–%d on the pool it said it needs: %v", i, i+2, short.Err())
		}
		for si, sp := range placed.Sessions {
			if d := cmp.Diff(plan.Sessions[si].Modules, sp.Modules, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Backends" }, cmp.Ignore())); d != "" {
				t.Errorf("workloads %d–%d: placement on a sufficient pool changed the plan:\n%s", i, i+2, d)
			}
		}
		// Half the pool: still never above occupancy 1, and every kept machine placed.
		half := members[:len(members)/2]
		placed, short, err = Place(&plan, half, placed, Options{})
		if err != nil {
			t.Fatal(err)
		}
		occupancy(t, placed, half)
		if len(members) > 1 && short.Missing() == 0 {
			t.Errorf("workloads %d–%d: half the pool and no shortfall reported", i, i+2)
		}
	}
}
