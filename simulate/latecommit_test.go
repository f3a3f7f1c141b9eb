package simulate

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Late commit (Options.LateCommit, Llama's per batch) on a module the
// pool-aware planner split across two hardware types (`piccolo plan` of
// the pool's one fast device and six slow ones, at 420 req/s under a 150
// ms SLO: one fast machine at batch 4 in 20 ms, price 3, carrying 160 req/s,
// and 5.69 slow ones at batch 4 in 70 ms, price 1, carrying 260). Poisson
// arrivals, durations ±20%, admission on, 60 s: at the plan's rate nothing
// is late and late commit changes nothing; at 1.43× (600 req/s) the batches
// the slow group's busy machines would end late go to the fast machine
// when it is idle, and more requests are served in time.
func TestLateCommitServesMoreUnderOverload(t *testing.T) {
	plan := &api.Plan{Sessions: []api.SessionPlan{{Name: "s", SLOMs: 150, Modules: []api.ModulePlan{{
		Name: "m", Rate: 420, BudgetMs: 150, Configs: []api.GroupPlan{
			{Hardware: "fast", Price: 3, Batch: 4, Concurrency: 1, DurationMs: 20, Machines: 1, Rate: 160, Cost: 3},
			{Hardware: "slow", Price: 1, Batch: 4, Concurrency: 1, DurationMs: 70, Machines: 5.6875, Rate: 260, Cost: 5.6875},
		}}}}}}
	att := map[float64]map[bool]float64{}
	for _, rate := range []float64{420, 600} {
		att[rate] = map[bool]float64{}
		for _, on := range []bool{false, true} {
			r, err := Run(plan, Options{Arrival: "poisson", RatePerSec: rate, Duration: 60 * time.Second, Seed: 1, Jitter: 0.2, Admission: true, LateCommit: on})
			if err != nil {
				t.Fatal(err)
			}
			s := r.Sessions[0]
			att[rate][on] = s.SLOAttainment
			t.Logf("%.0f req/s, late commit %v: attainment %.4f, goodput %.1f/s, refused %d, late-committed batches %d", rate, on, s.SLOAttainment, s.GoodputRPS, s.Refused, s.Modules[0].Dispatcher.LateCommitted)
		}
	}
	if att[420][false] < 0.999 || att[420][true] != att[420][false] {
		t.Errorf("at the plan's rate: attainment %.4f without, %.4f with late commit; want ≥ 0.999 and the same", att[420][false], att[420][true])
	}
	if att[600][true] <= att[600][false] {
		t.Errorf("at 1.43×: attainment %.4f without, %.4f with late commit; want more with it", att[600][false], att[600][true])
	}
}
