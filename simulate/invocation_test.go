package simulate

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// Llama's per-invocation slack (Options.InvocationSlack) gives a module the
// time its upstream saved: a → b, SLO 600 ms, a's budget 400 ms for a 5 ms
// batch, b's 200 ms for batches of up to 8 in 50 ms, 20 req/s at constant
// spacing, the deadline flush, admission on (the gateway's item times). With
// b's own budget, a partial batch goes 150 ms after its first item (3
// items); with the slack, when the request has 600 − 5 ms left, b waits for
// the full 8 (350 ms at 20 req/s): fewer, fuller batches, every request
// still in time.
func TestInvocationSlackFillsTheNextModulesBatches(t *testing.T) {
	g := func(batch int, ms float64) []api.GroupPlan {
		return []api.GroupPlan{{Hardware: "x", Price: 1, Batch: batch, Concurrency: 1, DurationMs: ms, Machines: 1, Rate: 1000 * float64(batch) / ms, Cost: 1}}
	}
	plan := &api.Plan{Sessions: []api.SessionPlan{{Name: "s", SLOMs: 600, Modules: []api.ModulePlan{
		{Name: "a", Rate: 20, BudgetMs: 400, Configs: g(1, 5)},
		{Name: "b", After: []string{"a"}, Rate: 20, BudgetMs: 200, Configs: g(8, 50)},
	}}}}
	mean := map[bool]float64{}
	for _, on := range []bool{false, true} {
		r, err := Run(plan, Options{Arrival: "constant", Duration: 20 * time.Second, Seed: 1, Flush: dispatcher.FlushDeadline, Admission: true, InvocationSlack: on})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Sessions[0]
		mean[on] = s.Modules[1].Slots[0].MeanBatch
		t.Logf("invocation slack %v: b's mean batch %.2f, attainment %.4f, p50 %.0f ms", on, mean[on], s.SLOAttainment, s.Latency.P50Ms)
		if s.SLOAttainment != 1 || len(s.Errors) != 0 {
			t.Errorf("invocation slack %v: attainment %.4f, errors %v; want every request in time", on, s.SLOAttainment, s.Errors)
		}
	}
	if mean[false] > 4 || mean[true] < 7 {
		t.Errorf("b's mean batch %.2f with its budget, %.2f with the slack; want about 3 and 8", mean[false], mean[true])
	}
}
