package simulate

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/scheduler"
)

// mmppTrace records horizon of an MMPP as a trace.
func mmppTrace(t testing.TB, m arrival.MMPP, horizon time.Duration, seed uint64) *arrival.Trace {
	t.Helper()
	p, err := arrival.Spec{Kind: "mmpp", MMPP: m}.New(seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(p, horizon, "mmpp")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// On bursty arrivals (MMPP: 5× the mean for 1 s, every 9 s on average) the plan
// from the mean rate misses a 99% attainment target, the plan PlanForTrace finds
// meets it in simulation, and it costs more than the mean-rate plan and no more
// than peak provisioning.
func TestPlanForTrace(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr := mmppTrace(t, arrival.MMPP{BurstRate: 250, BurstLength: time.Second, QuietRate: 25, QuietLength: 8 * time.Second}, 300*time.Second, 1)
	tp, err := PlanForTrace(cfg, scheduler.Options{}, 0.99, Options{Trace: tr, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name string
		run  PlanRun
	}{{"mean", tp.Mean}, {"trace", tp.Trace}, {"peak", tp.Peak}} {
		t.Logf("%s plan at %.1f req/s: cost %.3f, attainment %.4f", r.name, r.run.RatePerSec, r.run.Plan.TotalCost, r.run.Attainment)
	}
	if tp.Mean.Attainment >= 0.99 {
		t.Errorf("mean-rate plan reaches %.4f on the bursts; the test needs a trace it misses", tp.Mean.Attainment)
	}
	if !tp.TracePassed || tp.Trace.Attainment < 0.99 {
		t.Errorf("trace plan attainment %.4f, want ≥ 0.99", tp.Trace.Attainment)
	}
	if c, m, p := tp.Trace.Plan.TotalCost, tp.Mean.Plan.TotalCost, tp.Peak.Plan.TotalCost; !(c > m && c <= p) {
		t.Errorf("trace plan cost %.3f, want above the mean-rate plan's %.3f and at most peak provisioning's %.3f", c, m, p)
	}
}
