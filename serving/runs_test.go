package serving

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

func TestPlannerRunsPerChangeBefore(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	planner := func(c *api.Config) (*api.Plan, error) { return PlanForServing(c, scheduler.Options{}, 0) }
	pipe := Pipeline{Planner: planner}
	runs := func(f func()) int64 { b := scheduler.Runs(); f(); return scheduler.Runs() - b }
	est, _ := calibrate.New(calibrate.Options{})
	var last *replan.Replan
	now := time.Unix(1000, 0)
	ctl, err := replan.New(cfg, testharness.Members(map[string]int{"t4": 2, "v100": 2}), replan.Options{Plan: pipe.Plan, Calibration: est,
		Publish: func(r *replan.Replan) error { last = r; return nil }, Period: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("initial: %d", runs(func() { ctl.Step(now) }))
	next := replan.WithRates(cfg, map[replan.Key]float64{{Session: "paper-chain", Module: "m2"}: 100, {Session: "paper-chain", Module: "m3"}: 100})
	t.Logf("admin change: %d", runs(func() {
		f, _ := pipe.Fuse(next)
		p, perr := pipe.Plan(f)
		ctl.SetPlanned(f, &replan.Planned{Plan: p, Err: perr, Rates: ctl.PlanningRates(f)})
		now = now.Add(time.Second)
		ctl.Step(now)
	}))
	t.Logf("member join: %d", runs(func() {
		ctl.SetMembers(testharness.Members(map[string]int{"t4": 2, "v100": 3}))
		now = now.Add(time.Second)
		ctl.Step(now)
	}))
	t.Logf("drift: %d", runs(func() {
		for range 4 {
			for m := range last.Plan.Machines() {
				for range 16 {
					est.Observe(m.Module.Model, m.Group.Hardware, m.Backend, m.Group.Batch, m.Group.Concurrency, time.Duration(2.1*m.Group.DurationMs*float64(time.Millisecond)), now)
				}
			}
			now = now.Add(time.Second)
			ctl.Step(now)
		}
	}))
	t.Logf("last cause %s, devices missing %d, published %v", last.Cause, last.Shortfall.Missing(), ctl.Status().Replans)
}
