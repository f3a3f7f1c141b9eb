package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// fig3 is the paper's Fig. 3: 8 req/s over machines A and B (one group: batch 6,
// 2 s, 2 machines, 6 req/s) and C (batch 2, 1 s, 2 req/s), all at the same price.
func fig3() *api.Plan {
	return &api.Plan{Policy: "hand", Sessions: []api.SessionPlan{{
		Name: "fig3", SLOMs: 10000, LatencyMs: 2750,
		Modules: []api.ModulePlan{{Name: "m", Model: "m", Rate: 8, BudgetMs: 10000, WCLMs: 2750,
			Configs: []api.GroupPlan{
				{Hardware: "gpu", Price: 1, Batch: 6, Concurrency: 1, DurationMs: 2000, Machines: 2, Rate: 6, WCLMs: 2750, Cost: 2},
				{Hardware: "gpu", Price: 1, Batch: 2, Concurrency: 1, DurationMs: 1000, Machines: 1, Rate: 2, WCLMs: 2000, Cost: 1},
			}}}}}}
}

func TestFig3(t *testing.T) {
	max := map[dispatcher.Policy]float64{}
	for _, p := range []dispatcher.Policy{dispatcher.TC{}, dispatcher.RR{}} {
		r, err := Run(fig3(), Options{Policy: p, Arrival: "constant", Duration: 60 * time.Second, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Sessions[0]
		if s.Requests != 480 || s.Completed != 480 || len(s.Errors) != 0 {
			t.Fatalf("%s: %d requests, %d completed, errors %v; want 480 all completed", p, s.Requests, s.Completed, s.Errors)
		}
		max[p] = s.Latency.MaxMs
		t.Logf("%s: max latency %.1f ms, p50 %.1f ms; slots: %+v", p, s.Latency.MaxMs, s.Latency.P50Ms, s.Modules[0].Slots)
	}
	if max[dispatcher.TC{}] > 2750 {
		t.Errorf("TC max latency %.1f ms, want ≤ 2750 ms (Theorem 1: 2 s + 6/8 s)", max[dispatcher.TC{}])
	}
	if max[dispatcher.RR{}] < 3200 {
		t.Errorf("RR max latency %.1f ms, want ≥ 3200 ms (Fig. 3: 3.375 s)", max[dispatcher.RR{}])
	}
}

// chain is the paper's M2 -> M3 at 50 and 40 req/s.
func chain(budget3 float64) *api.Plan {
	return &api.Plan{Sessions: []api.SessionPlan{{Name: "chain", SLOMs: 900, LatencyMs: 600, Modules: []api.ModulePlan{
		{Name: "m2", Rate: 50, BudgetMs: 400, WCLMs: 300, Configs: []api.GroupPlan{
			{Hardware: "hw", Price: 1, Batch: 5, Concurrency: 1, DurationMs: 200, Machines: 2, Rate: 50, Cost: 2}}},
		{Name: "m3", After: []string{"m2"}, Rate: 40, BudgetMs: budget3, WCLMs: 300, Configs: []api.GroupPlan{
			{Hardware: "hw", Price: 1, Batch: 4, Concurrency: 2, DurationMs: 200, Machines: 1, Rate: 40, Cost: 1}}},
	}}}}
}

func TestChainShares(t *testing.T) {
	r, err := Run(chain(500), Options{Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Sessions[0]
	if s.Requests != 500 || s.Completed != 500 || len(s.Errors) != 0 {
		t.Fatalf("%d requests, %d completed, errors %v; want 500 completed", s.Requests, s.Completed, s.Errors)
	}
	if m2, m3 := s.Modules[0].Items, s.Modules[1].Items; m2 != 500 || m3 != 400 {
		t.Errorf("items m2 %d m3 %d, want 500 and 400 (4 of every 5)", m2, m3)
	}
	if s.Latency.MaxMs > s.SLOMs || s.SLOAttainment != 1 || s.GoodputRPS != 50 {
		t.Errorf("max %.1f ms, attainment %.3f, goodput %.1f; want all within the 900 ms SLO at 50/s",
			s.Latency.MaxMs, s.SLOAttainment, s.GoodputRPS)
	}
	// End to end is at least the two batch durations and at most the sum of WCLs.
	if s.Latency.MaxMs < 400 || s.Latency.MaxMs > 600 {
		t.Errorf("max end-to-end %.1f ms, want within [400, 600]", s.Latency.MaxMs)
	}
}

func TestDeadlineErrorsCounted(t *testing.T) {
	// m3's budget (150 ms) is shorter than its batch duration (200 ms): every m3
	// item is flushed at once and, queued behind a busy lane, some miss their
	// deadline; those requests fail with kind "deadline" and are never sent.
	r, err := Run(chain(150), Options{Duration: 10 * time.Second, Policy: dispatcher.TC{}})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Sessions[0]
	m3 := s.Modules[1]
	if s.Errors[KindDeadline] == 0 || s.Errors[KindDeadline] != m3.Errors[KindDeadline] {
		t.Fatalf("session errors %v, m3 errors %v: want deadline errors, the same count", s.Errors, m3.Errors)
	}
	if s.Completed+s.Errors[KindDeadline] != s.Requests {
		t.Errorf("%d completed + %d deadline != %d requests", s.Completed, s.Errors[KindDeadline], s.Requests)
	}
	dc := m3.Dispatcher
	if dc.DeadlineOnSend == 0 || dc.Sent+dc.DeadlineOnSend+dc.DeadlineOnSubmit > dc.Submitted {
		t.Errorf("m3 dispatcher counts %+v: want deadline failures, never sent", dc)
	}
}

func TestDeterministicAndValidated(t *testing.T) {
	o := Options{Arrival: "gamma", CV2: 4, Duration: 20 * time.Second, Seed: 7, Jitter: 0.1}
	a, err := Run(fig3(), o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(fig3(), o)
	if a.Sessions[0].Latency != b.Sessions[0].Latency || a.Requests != b.Requests {
		t.Errorf("same seed, different results: %+v vs %+v", a.Sessions[0].Latency, b.Sessions[0].Latency)
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "duration"},
		{Options{Duration: time.Second, Arrival: "bursty"}, "unknown arrival process"},
		{Options{Duration: time.Second, Jitter: 1}, "jitter"},
		{Options{Duration: time.Second, RatePerSec: -1}, "rate"},
	} {
		if _, err := Run(fig3(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error about %q", tc.o, err, tc.want)
		}
	}
}
