package replan

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/planner"
)

// TestPlannerSeesThePool: the controller hands its planner the members as
// the config's backends, so a planner that fits the plan to the devices per
// type (serving.Plan, here planner.Options.Pool from them)
// plans for the pool. The demo's paper-chain 1.6× slower on 8 t4 and 6
// v100, the config listing no backends: the plan published misses no device.
func TestPlannerSeesThePool(t *testing.T) {
	base, err := api.Load("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testharness.Slowed(base, 1.6)
	cfg.Backends = nil
	small := testharness.Members(map[string]int{"t4": 8, "v100": 6})
	var published []*Replan
	now := t0
	c, err := New(cfg, small, Options{
		Clock: fakeClock{&now},
		Plan: func(c *api.Config) (*api.Plan, error) {
			pool := map[string]int{}
			for _, b := range c.Backends {
				pool[b.Hardware]++
			}
			return planner.Plan(c, planner.Options{MaxUtilization: 0.8, Pool: pool})
		},
		Target: Publisher(func(r *Replan) error { published = append(published, r); return nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.step(now)
	if len(published) != 1 {
		t.Fatalf("published %d plans; want 1", len(published))
	}
	if m := published[0].Shortfall.Missing(); m != 0 {
		t.Errorf("the plan published misses %d devices of the 8 t4 and 6 v100 (%v); want none", m, published[0].Shortfall.Hardware)
	}
	// The plan fits by using every t4; v100s join: a cheaper plan fits now.
	c.SetMembers(testharness.Members(map[string]int{"t4": 8, "v100": 20}))
	c.step(now)
	if len(published) != 2 {
		t.Fatalf("after 14 more v100 joined a pool the plan used every t4 of: %d plans published; want a second", len(published))
	}
	if a, b := published[0].Plan.TotalCost, published[1].Plan.TotalCost; b >= a {
		t.Errorf("cost %.2f with 20 v100, %.2f with 6; want it lower", b, a)
	}
}
