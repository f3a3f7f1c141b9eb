package dataplane

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// A module budget is the planner's share of the SLO, not the request's
// deadline: an item that queues past its module budget is still sent while
// the request can make its own deadline, and given up (ErrDeadline) only when
// it cannot. The OCR demo lost 3–6% of its requests at its 10 ms "pre" module
// with p99 latency a tenth of the SLO before this.
func TestModuleBudgetDoesNotDropWhatTheSLOAllows(t *testing.T) {
	cfg, _ := harnessChainOnSims(t)
	group := func(durMs float64) []api.GroupPlan {
		return []api.GroupPlan{{Hardware: "v100", Price: 3, Batch: 1, Concurrency: 1, DurationMs: durMs,
			Throughput: 1000 / durMs, Machines: 1, Rate: 5, WCLMs: durMs, Cost: 3}}
	}
	// detect: 40 ms per item and a budget of 45 ms, so the second of three items
	// sent at once already waits past it; recognize: 30 ms after it.
	plan := &api.Plan{Policy: "piccolo", Sessions: []api.SessionPlan{{Name: "pipe", SLOMs: 1000, Modules: []api.ModulePlan{
		{Name: "detect", Model: "det", Rate: 5, BudgetMs: 45, WCLMs: 40, Configs: group(40)},
		{Name: "recognize", Model: "rec", After: []string{"detect"}, Rate: 5, BudgetMs: 900, WCLMs: 30, Configs: group(30)},
	}}}}
	runner, err := NewLiveRunner(context.Background(), cfg, plan, LiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()

	// burst sends three items to detect at once with the request deadline
	// `deadline` from now and returns their errors in submission order.
	burst := func(deadline time.Duration) []error {
		errs := make([]error, 3)
		var wg sync.WaitGroup
		dl := time.Now().Add(deadline)
		for i := range errs {
			wg.Add(1)
			in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 2}, Data: gatewaytest.FP32(1, 2)}}
			runner.Run(context.Background(), "pipe", "detect", in, &gateway.Call{Deadline: dl}, func(_ []api.Tensor, _ gateway.Timing, err error) {
				errs[i] = err
				wg.Done()
			})
		}
		wg.Wait()
		return errs
	}
	// With 1 s to go, all three are served: the third starts about 80 ms in,
	// long past its 45 ms budget, and its request still has 900 ms.
	for i, err := range burst(time.Second) {
		if err != nil {
			t.Errorf("item %d of a burst with a 1 s deadline: %v, want served", i, err)
		}
	}
	// With 100 ms to go, the third cannot start before 80 ms and would need 70 ms
	// more (detect, then recognize): it is given up with ErrDeadline, never sent.
	errs := burst(100 * time.Millisecond)
	if errs[0] != nil {
		t.Errorf("first item of a burst with a 100 ms deadline: %v, want served", errs[0])
	}
	if !errors.Is(errs[2], gateway.ErrDeadline) {
		t.Errorf("third item of a burst with a 100 ms deadline: %v, want ErrDeadline", errs[2])
	}
}

// A module's tail is the longest downstream path in shortest durations:
// on a diamond a → {b 30 ms, c 50 ms} → d 10 ms, a has 60 ms to go after it.
func TestSetTailsDiamond(t *testing.T) {
	ms := time.Millisecond
	mods := map[string]*liveModule{"a": {minDuration: 5 * ms}, "b": {minDuration: 30 * ms}, "c": {minDuration: 50 * ms}, "d": {minDuration: 10 * ms}}
	cfg := func(ms float64) []api.GroupPlan { return []api.GroupPlan{{DurationMs: ms}, {DurationMs: 2 * ms}} }
	setTails([]api.ModulePlan{{Name: "a", Configs: cfg(5)}, {Name: "b", After: []string{"a"}, Configs: cfg(30)},
		{Name: "c", After: []string{"a"}, Configs: cfg(50)}, {Name: "d", After: []string{"b", "c"}, Configs: cfg(10)}}, mods, false)
	for name, want := range map[string]time.Duration{"a": 60 * ms, "b": 10 * ms, "c": 10 * ms, "d": 0} {
		if got := mods[name].tail; got != want {
			t.Errorf("tail of %s = %v, want %v", name, got, want)
		}
	}
}
