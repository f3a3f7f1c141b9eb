package replan

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// A config handed over with its plan (SetPlanned, the config pipeline's
// checked plan) is placed and published without running the planner again;
// once a rate re-plan has put measured rates in use, a plan made at the
// config's rates is not taken: the controller plans at its own rates.
func TestSetPlannedTakesTheCheckedPlan(t *testing.T) {
	calls := 0
	h := newHarness(t, controlConfig(400, 200*time.Millisecond), pool("v100", 10), Options{})
	h.c.o.Plan = func(cfg *api.Config) (*api.Plan, error) {
		calls++
		return planner.Plan(cfg, planner.Options{})
	}
	next := controlConfig(800, 200*time.Millisecond)
	rates := h.c.PlanningRates(next)
	if got := rates[ModuleKey{"s", "a"}]; got != 800 {
		t.Fatalf("PlanningRates of a config at 800 req/s: %v, want 800 (no measured rate in use)", got)
	}
	plan, err := planner.Plan(next, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.c.SetPlanned(next, &Planned{Plan: plan, Rates: rates})
	h.c.step(h.now)
	if calls != 0 {
		t.Errorf("the planner ran %d times for a config handed over with its plan; want 0", calls)
	}
	r := h.last()
	if r.Cause != CauseConfig || r.Config != next || r.Unplaced != plan {
		t.Fatalf("published cause %q, config %p (want %p), unplaced %p (want the handed plan %p)", r.Cause, r.Config, next, r.Unplaced, plan)
	}

	// Rates handed over that are not the controller's: it plans itself.
	other := controlConfig(1600, 200*time.Millisecond)
	stale := map[ModuleKey]float64{{"s", "a"}: 1}
	h.c.SetPlanned(other, &Planned{Plan: plan, Rates: stale})
	h.c.step(h.now)
	if calls != 1 || h.last().Unplaced == plan {
		t.Errorf("a plan handed over at other rates: planner ran %d times (want 1), published the handed plan: %v", calls, h.last().Unplaced == plan)
	}
}
