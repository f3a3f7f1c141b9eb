package replan

import (
	"math"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/planner"
)

// poissonBuckets records d of Poisson arrivals at rate (seed) and returns
// their counts per TunerBucket, and the trace.
func poissonBuckets(t *testing.T, rate float64, d time.Duration, seed uint64) ([]int, *arrival.Trace) {
	t.Helper()
	p, err := arrival.Spec{Kind: "poisson", Rate: rate}.New(seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(p, d, "poisson")
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, int(d/TunerBucket))
	for _, o := range tr.Offsets {
		if i := int(o / TunerBucket); i < len(counts) {
			counts[i]++
		}
	}
	return counts, tr
}

// TestTunerRateStep is InferLine's Tuner (Algorithms 3 and 4) on a rate step,
// on the virtual clock: the plan is made for 60 s of Poisson at R; the live
// arrivals replay that trace (no action: it never exceeds its own envelope),
// then 2R for 30 s, then R again. The tuner must scale the module up within
// a second of the step, to about twice the plan's machines, without a whole
// re-plan, and back to the plan's machines once the 2R has left its 30 s
// window and 15 s have passed since its last action. Beside it: the control
// loop's re-plan on the same step in static mode (tick 100 ms, 500 ms
// sustained) takes 0.6–2 s and a planner run (TestControllerEnvelopeOverSLOWindows).
func TestTunerRateStep(t *testing.T) {
	const R = 400
	cfg := controlConfig(R, 200*time.Millisecond)
	plan, err := planner.Plan(cfg, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sample, tr := poissonBuckets(t, R, 60*time.Second, 1)
	now := t0
	tu, err := NewTuner(plan, "s", 200*time.Millisecond, tr, now)
	if err != nil {
		t.Fatal(err)
	}
	planned := tu.Machines()["a"]
	var decisions []TunerDecision
	var at []time.Duration
	feed := func(counts []int) {
		for _, c := range counts {
			now = now.Add(TunerBucket)
			tu.Observe(now, c)
			if d, ok := tu.Decide(); ok {
				decisions = append(decisions, d)
				at = append(at, now.Sub(t0))
			}
		}
	}
	feed(sample)
	if len(decisions) != 0 {
		t.Fatalf("replaying the planning trace: %d decisions (%+v); want none", len(decisions), decisions[0])
	}
	high, _ := poissonBuckets(t, 2*R, 30*time.Second, 2)
	step := now.Sub(t0)
	feed(high)
	if len(decisions) == 0 || !decisions[0].Up {
		t.Fatalf("2R: decisions %+v; want a scale-up", decisions)
	}
	took := at[0] - step
	up := decisions[len(decisions)-1].Machines["a"]
	t.Logf("R→2R: scaled up %v after the step (window %v, %.0f req/s): machines %.3g → %.3g (%d decisions)",
		took, decisions[0].Window, decisions[0].Rate, planned, up, len(decisions))
	if took > time.Second {
		t.Errorf("scaled up %v after the step; want within 1 s", took)
	}
	if ratio := tu.Machines()["a"] / planned; ratio < 1.8 || ratio > 2.6 {
		t.Errorf("machines %.3g after the step, plan %.3g (×%.2f); want about twice", tu.Machines()["a"], planned, ratio)
	}
	tuned := tu.Tuned(plan)
	if c := tuned.TotalCost / plan.TotalCost; math.Abs(c-tu.Machines()["a"]/planned) > 1e-9 {
		t.Errorf("tuned plan costs ×%.3f the plan; want ×%.3f, its machines", c, tu.Machines()["a"]/planned)
	}
	n := len(decisions)
	low, _ := poissonBuckets(t, R, 60*time.Second, 3)
	fall := now.Sub(t0)
	feed(low)
	if len(decisions) == n || decisions[len(decisions)-1].Up {
		t.Fatalf("2R→R: decisions %+v; want a scale-down", decisions[n:])
	}
	down := at[n] - fall
	t.Logf("2R→R: scaled down %v after the fall to %.3g machines", down, decisions[n].Machines["a"])
	for _, d := range decisions[n:] {
		if d.Up {
			t.Errorf("after the fall: scaled up again (%+v); want only scale-downs", d)
		}
	}
	last := at[len(at)-1] - fall
	t.Logf("2R→R: first scale-down %v after the fall, back at the plan's %.3g machines %v after it (%d decisions)", down, tu.Machines()["a"], last, len(decisions)-n)
	if down < TunerSettle || down > 35*time.Second {
		t.Errorf("first scale-down %v after the fall; want after 15 s settled and once the 2R left the 30 s window, within 35 s", down)
	}
	if m := tu.Machines()["a"]; m != planned || last > 62*time.Second {
		t.Errorf("machines %.3g %v after the fall; want the plan's %.3g once the 2R left the 60 s window", m, last, planned)
	}

	// Today's control loop on the same config and step, static mode's timing.
	h := newHarness(t, cfg, pool("v100", 10), Options{Tick: 100 * time.Millisecond, SustainUp: 500 * time.Millisecond})
	h.runFine(35*time.Second, R)
	cstep := h.now
	for h.now.Sub(cstep) < 5*time.Second && len(h.published) == 1 {
		h.runFine(h.mon.bucket, 2*R)
	}
	if len(h.published) != 2 {
		t.Fatalf("control loop: published %v on the step; want a rate re-plan", causes(h.published[1:]))
	}
	ctook := h.last().At.Sub(cstep)
	t.Logf("control loop on the same step: re-planned %v after it, cost %.3g → %.3g", ctook, plan.TotalCost, h.last().Plan.TotalCost)
	if took >= ctook {
		t.Errorf("tuner acted %v after the step, the control loop %v: want the tuner first", took, ctook)
	}
}

// TestControllerTuneAndHold: with the module held, a sustained 2R does not
// re-plan; Tune publishes the tuner's plan (cause tune) without running the
// planner, placed on the members.
func TestControllerTuneAndHold(t *testing.T) {
	const R = 400
	cfg := controlConfig(R, 2*time.Second)
	plans := 0
	h := newHarness(t, cfg, pool("v100", 10), Options{Tick: 100 * time.Millisecond, SustainUp: 500 * time.Millisecond,
		Hold: func(k ModuleKey) bool { return k == ModuleKey{"s", "a"} }})
	plan := func(c *api.Config) (*api.Plan, error) { plans++; return planner.Plan(c, planner.Options{}) }
	h.c.o.Plan = plan
	h.runFine(10*time.Second, 2*R)
	if len(h.published) != 1 || plans != 0 {
		t.Fatalf("held module at 2R: published %v, %d planner runs; want none", causes(h.published[1:]), plans)
	}
	tuned := *h.last().Unplaced
	tuned.Sessions = append([]api.SessionPlan(nil), tuned.Sessions...)
	tuned.Sessions[0].Modules = append([]api.ModulePlan(nil), tuned.Sessions[0].Modules...)
	mp := &tuned.Sessions[0].Modules[0]
	mp.Configs = append([]api.GroupPlan(nil), mp.Configs...)
	mp.Configs[0].Machines *= 3
	h.c.Tune(&tuned)
	h.runFine(h.mon.bucket, 2*R)
	if len(h.published) != 2 || h.last().Cause != CauseTune || plans != 0 {
		t.Fatalf("Tune: published %v, %d planner runs; want one tune, no planner run", causes(h.published[1:]), plans)
	}
	if got := h.last().Plan.Sessions[0].Modules[0].Configs[0]; got.Machines != mp.Configs[0].Machines || len(got.Backends) == 0 {
		t.Errorf("tuned plan published with %v machines on %v; want %v, placed", got.Machines, got.Backends, mp.Configs[0].Machines)
	}
}
