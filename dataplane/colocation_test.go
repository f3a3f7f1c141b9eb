package dataplane

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
)

// A health re-placement places with the slowdowns the control loop handed
// over (SetColocation): the pair stays apart; without them it is packed (x,
// a third fraction, takes the second device, so that packing leaves none
// idle for the fractions to spread over).
func TestReplacementKeepsInterferingPairApart(t *testing.T) {
	cfg := &api.Config{Backends: []api.Backend{{ID: "v100-0", Hardware: "v100"}, {ID: "v100-1", Hardware: "v100"}}}
	group := func(m float64) []api.GroupPlan {
		return []api.GroupPlan{{Hardware: "v100", Batch: 4, Concurrency: 1, DurationMs: 10, Machines: m}}
	}
	plan := &api.Plan{Sessions: []api.SessionPlan{{Name: "s", Modules: []api.ModulePlan{
		{Name: "a", Model: "ma", Configs: group(0.5)}, {Name: "b", Model: "mb", Configs: group(0.4)}, {Name: "x", Model: "mx", Configs: group(0.3)}}}}}
	together := func(p *api.Plan) bool {
		return p.Sessions[0].Modules[0].Configs[0].Backends[0] == p.Sessions[0].Modules[1].Configs[0].Backends[0]
	}
	s := &LiveSwitch{}
	placed, _, err := s.place(cfg, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !together(placed) {
		t.Fatalf("without slowdowns the two fractions should share a device: %+v", placed.Sessions[0].Modules)
	}
	s.SetColocation(placement.Options{Slowdowns: placement.Slowdowns{{Hardware: "v100", Model: "mb", With: "ma"}: 1.5}, Tolerance: 0.1})
	if placed, _, err = s.place(cfg, plan, nil); err != nil {
		t.Fatal(err)
	}
	if together(placed) {
		t.Errorf("with mb 1.5× slower beside ma the pair still shares a device: %+v", placed.Sessions[0].Modules)
	}
}
