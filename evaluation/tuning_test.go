package evaluation

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/serving"
	"github.com/piccolo-serving/piccolo/simulate"
)

// gammaTrace records d of gamma CV² 16 arrivals at rate req/s (seed).
func gammaTrace(t *testing.T, rate float64, d time.Duration, seed uint64) *arrival.Trace {
	t.Helper()
	p, err := arrival.Spec{Kind: "gamma", Rate: rate, CV2: 16}.New(seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(p, d, "gamma CV² 16")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// diurnal is d of gamma CV² 16 at 50 → 150 → 50 req/s (a half sine
// squared, 100 × d arrivals), the bursts of a unit-rate process warped to
// that rate (seed).
func diurnal(t *testing.T, d time.Duration, seed uint64) *arrival.Trace {
	t.Helper()
	rate := func(at time.Duration) float64 {
		s := math.Sin(math.Pi * at.Seconds() / d.Seconds())
		return 50 + 100*s*s
	}
	tr, err := arrival.Warp(gammaTrace(t, 1, 101*d, seed), rate, d, "gamma CV² 16, diurnal ramp")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTuningComparison is issue 21's tuner comparison, simulated: the demo
// chain planned for 60 s of gamma CV² 16 at 50 req/s (the trace plan, as
// `piccolo gateway --trace` serves it), then served (a) a rate step, 20 s at
// 50 req/s then 40 s at 100, and (b) a diurnal ramp, 50 → 150 → 50 req/s over
// 120 s (a half sine), by the trace plan unchanged, InferLine's tuner, the
// control loop's rate re-plan and coarse-grained tuning. It prints the
// table of docs/traffic.md "The tuner, simulated" (about a minute):
//
//	go test -count=1 -run TestTuningComparison -v ./evaluation
func TestTuningComparison(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute of planning and simulation")
	}
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sample := gammaTrace(t, 50, 60*time.Second, 1)
	load := simulate.Options{Seed: 1, Flush: dispatcher.FlushIdle}
	tp, err := serving.NewTracePlanner(cfg, serving.TracePlannerOptions{Trace: sample,
		Options: planner.Options{Policy: "piccolo"}, Load: load})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tp.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	coarseLoad := load
	coarseLoad.Trace = sample
	coarse, _, err := simulate.PlanCoarse(cfg, 0.99, coarseLoad)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trace plan cost %.4g (%.1f machines), coarse-grained %.4g (%.1f machines)",
		plan.TotalCost, PlanMachines(plan), coarse.Plan.TotalCost, PlanMachines(coarse.Plan))

	step := gammaTrace(t, 50, 20*time.Second, 2)
	for _, at := range gammaTrace(t, 100, 40*time.Second, 3).Offsets {
		step.Offsets = append(step.Offsets, 20*time.Second+at)
	}
	ramp := diurnal(t, 120*time.Second, 4)

	for _, c := range []struct {
		name     string
		arrivals *arrival.Trace
		change   time.Duration
	}{{"rate step 50 → 100 req/s at 20 s", step, 20 * time.Second}, {"diurnal ramp 50 → 150 → 50 req/s over 120 s", ramp, 0}} {
		rows, err := Tuning(TuningOptions{Config: cfg, Sample: sample, Plan: plan, Coarse: coarse.Plan,
			Replan: tp.Plan, Covers: tp.Covers, Arrivals: c.arrivals, Change: c.change,
			Delay: 500 * time.Millisecond, Flush: dispatcher.FlushIdle, Admission: true})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteTuning(&b, rows); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (%d requests), decisions served 500 ms after they are made:\n%s", c.name, len(c.arrivals.Offsets), b.String())
		unchanged, tuner, loop := rows[0], rows[1], rows[2]
		if c.change > 0 && (tuner.FirstUp < 0 || tuner.FirstUp > 2*time.Second) {
			t.Errorf("%s: the tuner's first scale-up served %v after the step; want within 2 s", c.name, tuner.FirstUp)
		}
		if tuner.After <= unchanged.After || tuner.After < loop.After {
			t.Errorf("%s: attainment after the change with the tuner %.2f%%, the plan unchanged %.2f%%, the control loop %.2f%%: want the tuner above the first, no worse than the second",
				c.name, 100*tuner.After, 100*unchanged.After, 100*loop.After)
		}
		if len(tuner.Changes) == 0 || tuner.Planned != 0 {
			t.Errorf("%s: the tuner made %d changes, %d with a planner run; want changes, none planned", c.name, len(tuner.Changes), tuner.Planned)
		}
	}
}
