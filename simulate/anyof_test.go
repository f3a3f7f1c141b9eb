package simulate

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// race is a session whose two branches race into an anyof join (or wait for
// both, join ""): in (5 ms) → fast (10 ms) and slow (durMs) → pick (5 ms),
// batch 1, one machine each, at 10 req/s.
func race(join string, slowMs float64) *api.Plan {
	g := func(hw string, ms float64) []api.GroupPlan {
		return []api.GroupPlan{{Hardware: hw, Price: 1, Batch: 1, Concurrency: 1, DurationMs: ms, Machines: 1, Rate: 1000 / ms, Cost: 1,
			Backends: []string{hw}}}
	}
	return &api.Plan{Sessions: []api.SessionPlan{{Name: "race", SLOMs: 500, Modules: []api.ModulePlan{
		{Name: "in", Rate: 10, BudgetMs: 100, Configs: g("a", 5)},
		{Name: "fast", After: []string{"in"}, Rate: 10, BudgetMs: 100, Configs: g("b", 10)},
		{Name: "slow", After: []string{"in"}, Rate: 10, BudgetMs: 300, Configs: g("c", slowMs)},
		{Name: "pick", After: []string{"fast", "slow"}, Join: join, Rate: 10, BudgetMs: 100, Configs: g("d", 5)},
	}}}}
}

// An anyof join completes on its first parent, as the gateway's does: the
// request ends after in, fast and pick (20 ms), not after the slow branch
// (70 ms), and the slow branch's work, cut, is neither an error of the
// request nor a latency of the module. Under a slow branch that cannot keep
// up (150 ms a batch at 10 req/s: its queue grows), the cut
// sweeps its queued items, and every request still completes in time;
// waiting for both, requests go late.
func TestAnyOfCompletesOnTheFirstParent(t *testing.T) {
	for _, tc := range []struct {
		join         string
		slowMs       float64
		p50Lo, p50Hi float64
		wantAllOK    bool
	}{
		{api.JoinAnyOf, 60, 19, 21, true},
		{"", 60, 69, 71, true},
		{api.JoinAnyOf, 150, 19, 21, true},
		{"", 150, 150, 1e9, false},
	} {
		r, err := Run(race(tc.join, tc.slowMs), Options{Arrival: "constant", Duration: 20 * time.Second, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Sessions[0]
		ok := s.Completed == s.Requests && len(s.Errors) == 0 && s.SLOAttainment == 1
		t.Logf("join %q slow %v ms: %d requests, %d completed, errors %v, attainment %.3f, p50 %.1f ms, slow items %d, sent %d of %d",
			tc.join, tc.slowMs, s.Requests, s.Completed, s.Errors, s.SLOAttainment, s.Latency.P50Ms, s.Modules[2].Items, s.Modules[2].Dispatcher.Sent, s.Modules[2].Dispatcher.Submitted)
		if ok != tc.wantAllOK {
			t.Errorf("join %q slow %v ms: %d of %d completed, errors %v, attainment %.3f; want all in time: %v",
				tc.join, tc.slowMs, s.Completed, s.Requests, s.Errors, s.SLOAttainment, tc.wantAllOK)
		}
		if s.Latency.P50Ms < tc.p50Lo || s.Latency.P50Ms > tc.p50Hi {
			t.Errorf("join %q slow %v ms: p50 %.1f ms, want in [%v, %v]", tc.join, tc.slowMs, s.Latency.P50Ms, tc.p50Lo, tc.p50Hi)
		}
		if tc.join == api.JoinAnyOf && (s.Modules[2].Items != 0 || len(s.Modules[2].Errors) != 0) {
			t.Errorf("anyof: the losing branch has %d measured items and errors %v, want none", s.Modules[2].Items, s.Modules[2].Errors)
		}
	}
}
