package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
)

// sharing reports whether models a and b of a placed one-session test plan
// have a backend in common.
func sharing(placed *api.Plan, a, b string) bool {
	on := map[string]map[string]bool{}
	for _, mp := range placed.Sessions[0].Modules {
		for _, g := range mp.Configs {
			for _, id := range g.Backends {
				if on[mp.Model] == nil {
					on[mp.Model] = map[string]bool{}
				}
				on[mp.Model][id] = true
			}
		}
	}
	for id := range on[a] {
		if on[b][id] {
			return true
		}
	}
	return false
}

// Without slowdowns, FFD packs model0 (0.5) with model1 (0.4) and model2
// (0.3) on the second device. model1 measured 1.4× slower beside model0
// (either way round) is kept off model0's device: model0 shares with model2
// instead, on as many devices as before.
func TestPlaceAvoidsInterferingPairs(t *testing.T) {
	plan := testPlan([]float64{0.5, 0.4, 0.3})
	members := pool("v100", 3)
	base, short, err := Place(plan, members, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !sharing(base, "model0", "model1") || short.Hardware[0].Used != 2 {
		t.Fatalf("without slowdowns model0 and model1 share a device on 2 devices; got %+v", base.Sessions[0].Modules)
	}
	for _, s := range []Slowdowns{
		{{"v100", "model1", "model0"}: 1.4},
		{{"v100", "model0", "model1"}: 1.4},
	} {
		placed, short, err := Place(plan, members, nil, Options{Slowdowns: s})
		if err != nil {
			t.Fatal(err)
		}
		occupancy(t, placed, members)
		if sharing(placed, "model0", "model1") {
			t.Errorf("slowdowns %v: model0 and model1 still share a device: %+v", s, placed.Sessions[0].Modules)
		}
		if !sharing(placed, "model0", "model2") {
			t.Errorf("slowdowns %v: model2 (no slowdown) not packed beside model0: %+v", s, placed.Sessions[0].Modules)
		}
		if short.Hardware[0].Used != 2 || short.Interfering != 0 || short.Err() != nil {
			t.Errorf("slowdowns %v: shortfall %+v; want 2 devices used, none interfering", s, short)
		}
	}
	// The same pair on another hardware type is no reason here.
	placed, _, err := Place(plan, members, nil, Options{Slowdowns: Slowdowns{{"t4", "model1", "model0"}: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(base, placed); d != "" {
		t.Errorf("a t4 slowdown changed a v100 placement:\n%s", d)
	}
}

// A pair that interferes takes a spare device when no shared one fits, and
// packs anyway (counted in Interfering) when the pool has none: served
// slower rather than not at all.
func TestPlaceInterferingPairSpareOrFallback(t *testing.T) {
	plan := testPlan([]float64{0.6, 0.3})
	slow := Options{Slowdowns: Slowdowns{{"v100", "model1", "model0"}: 2}}

	placed, short, err := Place(plan, pool("v100", 2), nil, slow)
	if err != nil {
		t.Fatal(err)
	}
	if sharing(placed, "model0", "model1") || short.Hardware[0].Used != 2 || short.Interfering != 0 {
		t.Errorf("with a spare device: %+v, shortfall %+v; want the pair on 2 devices", placed.Sessions[0].Modules, short)
	}

	placed, short, err = Place(plan, pool("v100", 1), nil, slow)
	if err != nil {
		t.Fatal(err)
	}
	if !sharing(placed, "model0", "model1") || short.Interfering != 1 || short.Err() != nil {
		t.Errorf("with no spare device: %+v, shortfall %+v; want the pair packed, 1 interfering, no shortfall", placed.Sessions[0].Modules, short)
	}

	// Static placement (a gateway's static backends) avoids the same way.
	placed, _, err = Place(plan, pool("v100", 2), nil, Options{Static: true, Slowdowns: slow.Slowdowns})
	if err != nil {
		t.Fatal(err)
	}
	if sharing(placed, "model0", "model1") {
		t.Errorf("static: the pair shares a device with a spare listed: %+v", placed.Sessions[0].Modules)
	}
}

// Slowdowns within the tolerance, or of pairs that need not share, leave the
// placement as it is; the tolerance is Options.Tolerance's.
func TestPlaceUnchangedWithoutInterference(t *testing.T) {
	plan := testPlan([]float64{2, 0.3, 0.6, 0.4, 0.5})
	members := pool("v100", 5)
	base, baseShort, err := Place(plan, members, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Options{
		"empty":            {Slowdowns: Slowdowns{}},
		"within 10%":       {Slowdowns: Slowdowns{{"v100", "model3", "model2"}: 1.09, {"v100", "model4", "model1"}: 1.1}},
		"within tolerance": {Slowdowns: Slowdowns{{"v100", "model3", "model2"}: 1.25}, Tolerance: 0.3},
		"full machines":    {Slowdowns: Slowdowns{{"v100", "model0", "model1"}: 5}},
	} {
		placed, short, err := Place(plan, members, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(base, placed); d != "" {
			t.Errorf("%s: placement changed:\n%s", name, d)
		}
		if d := cmp.Diff(baseShort, short); d != "" {
			t.Errorf("%s: shortfall changed:\n%s", name, d)
		}
	}
	// Beyond the tolerance the same pair is kept apart, every time alike.
	o := Options{Slowdowns: Slowdowns{{"v100", "model3", "model2"}: 1.25, {"v100", "model4", "model1"}: 1.5}}
	first, _, err := Place(plan, members, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if sharing(first, "model2", "model3") || sharing(first, "model1", "model4") {
		t.Errorf("pairs beyond the default tolerance share: %+v", first.Sessions[0].Modules)
	}
	for range 20 {
		again, _, _ := Place(plan, members, nil, o)
		if d := cmp.Diff(first, again); d != "" {
			t.Fatalf("placement not deterministic:\n%s", d)
		}
	}
}
