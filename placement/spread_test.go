package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
)

// TestPlaceStaticSpreadsFractions: on a static list, fractional machines of
// different modules spread over the devices the packing leaves idle (the
// least used one a fraction fits on once none is free), as long as the
// full machines still keep a device each; Needed stays what packing needs.
// The demo's shape first: two OCR sessions' det and per-box chain on two
// one-lane cpu-1t backends, which packing stacked on one (docs/ocr.md, "One
// lane, four models").
func TestPlaceStaticSpreadsFractions(t *testing.T) {
	frac := func(session, module string, machines float64) api.SessionPlan {
		return api.SessionPlan{Name: session, Modules: []api.ModulePlan{{Name: module, Model: module, Configs: []api.GroupPlan{{Hardware: "cpu", Machines: machines}}}}}
	}
	demo := &api.Plan{Sessions: []api.SessionPlan{
		{Name: "ocr", Modules: []api.ModulePlan{
			{Name: "det", Model: "det", Configs: []api.GroupPlan{{Hardware: "cpu", Machines: 0.39}}},
			{Name: "chain", Model: "chain", Configs: []api.GroupPlan{{Hardware: "cpu", Machines: 0.12}}},
		}},
		{Name: "ocr-variants", Modules: []api.ModulePlan{
			{Name: "det", Model: "det-480", Configs: []api.GroupPlan{{Hardware: "cpu", Machines: 0.31}}},
			{Name: "chain", Model: "chain", Configs: []api.GroupPlan{{Hardware: "cpu", Machines: 0.12}}},
		}},
	}}
	members := func(n int) []Member {
		var out []Member
		for i := range n {
			out = append(out, Member{ID: string(rune('a' + i)), Hardware: "cpu"})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		plan    *api.Plan
		members int
		want    map[string]float64 // occupancy per device
		needed  int
	}{
		{"the demo's CPU models on two devices", demo, 2, map[string]float64{"a": 0.51, "b": 0.43}, 1},
		{"on one device: packed as before", demo, 1, map[string]float64{"a": 0.94}, 1},
		{"full machines keep a device each", &api.Plan{Sessions: []api.SessionPlan{
			frac("x", "x", 0.5), frac("y", "y", 2), frac("z", "z", 0.4)}},
			3, map[string]float64{"a": 1, "b": 0.9, "c": 1}, 3},
		{"a free device beside a full machine", &api.Plan{Sessions: []api.SessionPlan{
			frac("x", "x", 1.3), frac("y", "y", 0.5)}},
			3, map[string]float64{"a": 1, "b": 0.5, "c": 0.3}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			placed, short, err := Place(tc.plan, members(tc.members), nil, Options{Static: true})
			if err != nil || short.Err() != nil || short.Shared != 0 {
				t.Fatalf("err %v, shortfall %v, shared %d", err, short.Err(), short.Shared)
			}
			got := map[string]float64{}
			for m := range placed.Machines() {
				got[m.Backend] += min(1, m.Group.Machines-float64(m.Index))
			}
			if d := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); d != "" {
				t.Errorf("occupancy per device (-want +got):\n%s", d)
			}
			if len(short.Hardware) != 1 || short.Hardware[0].Needed != tc.needed {
				t.Errorf("shortfall %+v; want %d needed (the packing's)", short.Hardware, tc.needed)
			}
			// Placed again from itself, every machine stays where it is.
			again, _, err := Place(tc.plan, members(tc.members), placed, Options{Static: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(backendsOf(placed), backendsOf(again)); d != "" {
				t.Errorf("re-placed from itself, machines moved (-before +after):\n%s", d)
			}
		})
	}
}

func backendsOf(p *api.Plan) map[string][]string {
	out := map[string][]string{}
	for _, sp := range p.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				out[sp.Name+"/"+mp.Name] = append(out[sp.Name+"/"+mp.Name], g.Backends...)
			}
		}
	}
	return out
}
