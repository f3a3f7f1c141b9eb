package replan

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// coarsePlan is a planned two-module session "s": module a on 1.5 v100 and
// 0.5 t4 (2 machines), module b on 3 t4: pipeline replicas 3 (its most).
func coarsePlan() *api.Plan {
	group := func(hw string, machines, price float64) api.GroupPlan {
		return api.GroupPlan{Hardware: hw, Machines: machines, Price: price, Cost: machines * price, Throughput: 100}
	}
	a := api.ModulePlan{Name: "a", Rate: 100, Configs: []api.GroupPlan{group("v100", 1.5, 3), group("t4", 0.5, 1)}, Cost: 5}
	b := api.ModulePlan{Name: "b", Rate: 100, After: []string{"a"}, Configs: []api.GroupPlan{group("t4", 3, 1)}, Cost: 3}
	return &api.Plan{Sessions: []api.SessionPlan{{Name: "s", Modules: []api.ModulePlan{a, b}, Cost: 8}}, TotalCost: 8}
}

// TestCoarseTunerScalesWholePipeline is `--tune-scope pipeline`'s rule on a
// rate step and its fall, on the virtual clock: the plan is made for 60 s of
// Poisson at 100 req/s; replaying it changes nothing; at 2× the tuner adds
// whole pipeline replicas within CoarseEvery of the 5 s window seeing it,
// and every decision and tuned plan scales every module (and every group of
// it) by the same factor, replicas now / the plan's 3; after the fall it
// returns to the plan's replicas, not before CoarseSettle.
func TestCoarseTunerScalesWholePipeline(t *testing.T) {
	plan := coarsePlan()
	sample, tr := poissonBuckets(t, 100, 60*time.Second, 1)
	tu, err := NewScopedTuner(ScopePipeline, plan, "s", 500*time.Millisecond, tr, t0)
	if err != nil {
		t.Fatal(err)
	}
	planned := map[string]float64{"a": 2, "b": 3}
	type step struct {
		at time.Duration
		d  TunerDecision
	}
	var steps []step
	var bucket int
	feed := func(counts []int) {
		for _, c := range counts {
			bucket++
			tu.Observe(t0.Add(time.Duration(bucket)*TunerBucket), c)
			if d, ok := tu.Decide(); ok {
				steps = append(steps, step{time.Duration(bucket) * TunerBucket, d})
				tuned := tu.Tuned(plan)
				f := d.Machines["b"] / planned["b"]
				if r := f * 3; math.Abs(r-math.Round(r)) > 1e-9 {
					t.Errorf("%v: %.4g pipeline replicas; want whole replicas", steps[len(steps)-1].at, r)
				}
				for m, k := range planned {
					if got := d.Machines[m] / k; math.Abs(got-f) > 1e-9 {
						t.Errorf("%v: module %s scaled ×%.4g, module b ×%.4g; want every module by the same factor", steps[len(steps)-1].at, m, got, f)
					}
				}
				for i, mp := range tuned.Sessions[0].Modules {
					for j, g := range mp.Configs {
						if was := plan.Sessions[0].Modules[i].Configs[j].Machines; math.Abs(g.Machines-was*f) > 1e-9 {
							t.Errorf("tuned plan: module %s group %d has %.4g machines; want %.4g × %.4g", mp.Name, j, g.Machines, was, f)
						}
					}
				}
				if math.Abs(tuned.TotalCost-plan.TotalCost*f) > 1e-9 {
					t.Errorf("tuned plan costs %.4g; want the plan's %.4g × %.4g", tuned.TotalCost, plan.TotalCost, f)
				}
			}
		}
	}
	feed(sample)
	if len(steps) != 0 {
		t.Fatalf("replaying the planning trace: %+v; want no decision", steps[0].d)
	}
	high, _ := poissonBuckets(t, 200, 30*time.Second, 2)
	stepAt := time.Duration(bucket) * TunerBucket
	feed(high)
	if len(steps) == 0 || !steps[0].d.Up {
		t.Fatalf("at 2×: %+v; want a scale-up", steps)
	}
	up := steps[len(steps)-1].d.Machines
	t.Logf("2×: first scale-up %v after the step; machines a %.3g → %.3g, b %.3g → %.3g (%d decisions)",
		steps[0].at-stepAt, planned["a"], up["a"], planned["b"], up["b"], len(steps))
	if took := steps[0].at - stepAt; took > 3*time.Second {
		t.Errorf("first scale-up %v after the step; want within 3 s", took)
	}
	if f := up["b"] / planned["b"]; f < 1.3 || f > 3 {
		t.Errorf("after the step ×%.3g; want about twice the plan's replicas", f)
	}
	n := len(steps)
	low, _ := poissonBuckets(t, 100, 60*time.Second, 3)
	fall := time.Duration(bucket) * TunerBucket
	feed(low)
	if len(steps) == n || steps[len(steps)-1].d.Up {
		t.Fatalf("after the fall: %+v; want a scale-down", steps[n:])
	}
	if first := steps[n].at - fall; first < CoarseSettle {
		t.Errorf("first scale-down %v after the fall; want after %v below", first, CoarseSettle)
	}
	if last := steps[len(steps)-1].d.Machines; last["a"] != planned["a"] || last["b"] != planned["b"] {
		t.Errorf("after the fall: machines %v; want the plan's %v", last, planned)
	}
}

func TestTunerScopeErrors(t *testing.T) {
	_, err := NewScopedTuner("session", coarsePlan(), "s", time.Second, nil, t0)
	if err == nil || !strings.Contains(err.Error(), `"session"`) || !strings.Contains(err.Error(), "module, pipeline") {
		t.Errorf("unknown scope: error %v; want one naming it and module, pipeline", err)
	}
	_, tr := poissonBuckets(t, 100, 10*time.Second, 1)
	if _, err := NewScopedTuner(ScopePipeline, coarsePlan(), "other", time.Second, tr, t0); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("session not in the plan: error %v; want one naming it", err)
	}
}

// TestCoarseTunerAtThePlanIsThePlan: with a plan of fractional pipeline
// replicas (2.5 machines for the widest module), the tuner at its starting
// replicas scales by 1: the tuned plan is the plan, not 20% over it.
func TestCoarseTunerAtThePlanIsThePlan(t *testing.T) {
	plan := &api.Plan{Sessions: []api.SessionPlan{{Name: "s", Modules: []api.ModulePlan{
		{Name: "a", Rate: 10, Configs: []api.GroupPlan{{Hardware: "v100", Batch: 1, Concurrency: 1, DurationMs: 100, Machines: 2.5, Rate: 10}}},
	}}}}
	_, tr := poissonBuckets(t, 10, 10*time.Second, 1)
	c, err := NewCoarseTuner(plan, "s", tr)
	if err != nil {
		t.Fatal(err)
	}
	tuned := c.Tuned(plan)
	if got := tuned.Sessions[0].Modules[0].Configs[0].Machines; got != 2.5 {
		t.Errorf("at the plan's replicas the tuned module has %v machines; want the plan's 2.5", got)
	}
}
