package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// slackPlan is the harness chain planned as the demo's m2 was at 203.5 req/s:
// detect b8 in 427 ms with a 486 ms budget and a 461 ms WCL (24 ms of
// headroom, under the default slack's 49 ms), recognize with a budget of
// twice its WCL.
func slackPlan() *api.Plan {
	group := func(durMs, rate float64) []api.GroupPlan {
		return []api.GroupPlan{{Hardware: "v100", Price: 3, Batch: 8, Concurrency: 1, DurationMs: durMs,
			Throughput: 8000 / durMs, Machines: 1, Rate: rate, WCLMs: durMs, Cost: 3}}
	}
	return &api.Plan{Policy: "piccolo", Sessions: []api.SessionPlan{{Name: "pipe", SLOMs: 1500, Modules: []api.ModulePlan{
		{Name: "detect", Model: "det", Rate: 15, BudgetMs: 486, WCLMs: 461, Configs: group(427, 15)},
		{Name: "recognize", Model: "rec", After: []string{"detect"}, Rate: 15, BudgetMs: 1000, WCLMs: 500, Configs: group(400, 15)},
	}}}}
}

// The slack is at most the module's headroom in the plan (budget − WCL): a
// deadline flush earlier than that cannot fill the planned batch at the
// planned rate. detect keeps 25 ms, not 10% of 486 ms; recognize, with room,
// keeps its 10%.
func TestSlackLeavesThePlannedBatchRoom(t *testing.T) {
	cfg, _ := harnessChainOnSims(t)
	runner, err := NewLiveRunner(context.Background(), cfg, slackPlan(), LiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	for mod, want := range map[string]time.Duration{"detect": 25 * time.Millisecond, "recognize": 100 * time.Millisecond} {
		if got := runner.sessions["pipe"][mod].slack; got != want {
			t.Errorf("%s: slack %v, want %v", mod, got, want)
		}
	}
}

// With the dispatchers' admission, a module's Estimate is its shortest batch
// duration, whatever its queue: Little's law counts the plan's machines only,
// not the spare ones the dispatcher overflows to, and refused at the gateway
// what they serve. Without admission it still adds the drain time.
func TestEstimateLeavesTheQueueToAdmission(t *testing.T) {
	cfg, _ := harnessChainOnSims(t)
	for _, admission := range []bool{true, false} {
		runner, err := NewLiveRunner(context.Background(), cfg, slackPlan(), LiveOptions{Admission: admission})
		if err != nil {
			t.Fatal(err)
		}
		lm := runner.sessions["pipe"]["detect"]
		lm.outstanding.Store(100) // far beyond capacity × WCL (~9 items)
		got := runner.Estimate("pipe", "detect")
		runner.Close()
		if admission && got != 427*time.Millisecond {
			t.Errorf("admission on, 100 items outstanding: estimate %v, want the shortest batch, 427ms", got)
		}
		if !admission && got <= 427*time.Millisecond {
			t.Errorf("admission off, 100 items outstanding: estimate %v, want more than 427ms (the drain time added)", got)
		}
	}
}

// Only the modules a request enters its session by keep the admission
// margin: a source of the DAG, not a module after one, nor a module or
// session the config does not have.
func TestHandoffMarginAtTheSessionsSources(t *testing.T) {
	cfg := &api.Config{Sessions: []api.Session{{Name: "s", Modules: []api.Module{
		{Name: "det"}, {Name: "meta"}, {Name: "rec", After: []string{"det"}}, {Name: "out", After: []string{"rec", "meta"}},
	}}}}
	for _, tc := range []struct {
		session, module string
		want            time.Duration
	}{{"s", "det", HandoffMargin}, {"s", "meta", HandoffMargin}, {"s", "rec", 0}, {"s", "out", 0}, {"s", "gone", 0}, {"other", "det", 0}} {
		if got := handoffMarginOf(cfg, tc.session, tc.module); got != tc.want {
			t.Errorf("handoffMarginOf(%s, %s) = %v, want %v", tc.session, tc.module, got, tc.want)
		}
	}
}
