package replan

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler"
)

// TestFitPool: the demo's paper-chain with every device 1.6× slower, on 8 t4
// and 6 v100. The cheapest plan per type puts both modules on v100 and needs
// 9 v100; the controller plans it again without v100 for one model and
// publishes the plan that misses the fewest devices (m3 on t4, m2 on 6.25
// v100: one device shared), every session planned. With a pool large
// enough the cheapest plan is kept.
func TestFitPool(t *testing.T) {
	base, err := api.Load("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testharness.Slowed(base, 1.6)
	small := testharness.Members(map[string]int{"t4": 8, "v100": 6})
	missing := func(p *api.Plan) int {
		_, short, err := placement.Place(p, small, nil, placement.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return short.Missing()
	}
	cheapest, err := scheduler.Plan(cfg, scheduler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, small, Options{})
	p := h.last().Unplaced
	if m, m0 := missing(p), missing(cheapest); m >= m0 || m > 1 {
		t.Fatalf("published a plan that misses %d devices of the 8 t4 and 6 v100 (the cheapest plan: %d); want at most 1", m, m0)
	}
	for _, sp := range p.Sessions {
		if sp.Error != "" {
			t.Fatalf("session %s not planned: %s", sp.Name, sp.Error)
		}
	}
	large := testharness.Members(map[string]int{"t4": 8, "v100": 20})
	hl := newHarness(t, cfg, large, Options{})
	if pl := hl.last().Unplaced; pl.TotalCost != cheapest.TotalCost {
		t.Errorf("with 20 v100 the plan costs %.3f; want the cheapest plan's %.3f", pl.TotalCost, cheapest.TotalCost)
	}
}

// TestFitPoolPlansAgainWhenThePoolGrows: a plan fitted to a short pool is
// planned again when members of a type it was short of join, though the
// pool's hardware types stay the same (members join one by one; the first
// of a type would otherwise fix the plan for the pool as it was then).
func TestFitPoolPlansAgainWhenThePoolGrows(t *testing.T) {
	base, err := api.Load("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testharness.Slowed(base, 1.6)
	cheapest, err := scheduler.Plan(cfg, scheduler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, testharness.Members(map[string]int{"t4": 8, "v100": 6}), Options{})
	if got := h.last().Unplaced.TotalCost; got == cheapest.TotalCost {
		t.Fatalf("on 8 t4 and 6 v100 the plan costs %.3f, the cheapest plan's; want one fitted to the pool", got)
	}
	h.now = h.now.Add(time.Second)
	h.c.SetMembers(testharness.Members(map[string]int{"t4": 8, "v100": 20}))
	h.c.step(h.now)
	if got := h.last(); got.Cause != CauseMembership || got.Unplaced.TotalCost != cheapest.TotalCost {
		t.Errorf("after 14 v100 joined: last plan %s at cost %.3f; want a membership re-plan to the cheapest plan's %.3f", got.Cause, got.Unplaced.TotalCost, cheapest.TotalCost)
	}
}

// TestPlannerSeesThePool: the controller hands its planner the members as
// the config's backends, so a planner that fits the plan to the devices per
// type (controlplane.PlanForServing, here scheduler.Options.Pool from them)
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
			return scheduler.Plan(c, scheduler.Options{MaxUtilization: 0.8, Pool: pool})
		},
		Publish: func(r *Replan) error { published = append(published, r); return nil },
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
