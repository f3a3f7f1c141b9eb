package replan

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
)

// benchPlan is 12 random sessions planned together, and a pool that suffices.
func benchPlan(b *testing.B) (*api.Config, *api.Plan, []placement.Member) {
	cfg := &api.Config{}
	for i, c := range planner.GenerateWorkloads(11, 12, planner.DefaultWorkloadSpec) {
		for _, h := range c.Hardware {
			if _, ok := cfg.HardwareByName(h.Name); !ok {
				cfg.Hardware = append(cfg.Hardware, h)
			}
		}
		cfg.Profiles = append(cfg.Profiles, c.Profiles...)
		cfg.Sessions = append(cfg.Sessions, c.Sessions...)
		_ = i
	}
	plan, _ := planner.Plan(cfg, planner.Options{})
	_, need, _ := placement.Place(plan, nil, nil, placement.Options{})
	var members []placement.Member
	for _, h := range need.Hardware {
		members = append(members, pool(h.Hardware, h.Needed+2)...)
	}
	return cfg, plan, members
}

// BenchmarkPlace places a plan of 12 sessions on its pool, keeping the previous placement.
func BenchmarkPlace(b *testing.B) {
	_, plan, members := benchPlan(b)
	prev, _, _ := placement.Place(plan, members, nil, placement.Options{})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := placement.Place(plan, members, prev, placement.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(members)), "backends")
}

// BenchmarkMembershipChange is the controller's share of "membership change →
// new dispatch table": one backend leaves or comes back, the controller
// re-places the last plan and hands it to Publish.
func BenchmarkMembershipChange(b *testing.B) {
	cfg, _, members := benchPlan(b)
	now := t0
	c, err := New(cfg, members, Options{Clock: fakeClock{&now},
		Plan:   func(cfg *api.Config) (*api.Plan, error) { return planner.Plan(cfg, planner.Options{}) },
		Target: Publisher(func(*Replan) error { return nil })})
	if err != nil {
		b.Fatal(err)
	}
	c.step(now)
	b.ReportAllocs()
	for b.Loop() {
		// The backend the first module runs on leaves: its machine moves.
		used := c.placed.Sessions[0].Modules[0].Configs[0].Backends[0]
		var without []placement.Member
		for _, m := range members {
			if m.ID != used {
				without = append(without, m)
			}
		}
		c.SetMembers(without)
		c.step(now)
	}
	if c.Status().Replans[CauseMembership] < b.N {
		b.Fatalf("%d membership re-plans published for %d changes", c.Status().Replans[CauseMembership], b.N)
	}
}
