package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

// The demo's session: at the planner's default 0.8 the simulator finds fewer than
// 99.9% of Poisson requests within the SLO, so a 99.9% target needs more headroom;
// the plan found meets the target in its own simulation and costs more than the 0.8
// plan. docs/planner.md quotes the figures this test logs (go test -v -run
// TestPlanForBursts ./simulate).
func TestPlanForBursts(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, rep, err := PlanForBursts(cfg, planner.Options{}, BurstCheck{Target: 0.999, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if plan.MaxUtilization >= 0.8 {
		t.Errorf("chose utilisation %.2f, want below the 0.8 that misses 99.9%%", plan.MaxUtilization)
	}
	for _, s := range rep.Sessions {
		if s.SLOAttainment < 0.999 {
			t.Errorf("session %s: simulated attainment %.4f below the target", s.Name, s.SLOAttainment)
		}
	}
	base, err := planner.Plan(cfg, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(base, Options{Policy: dispatcher.TC{}, Arrival: "poisson", Duration: 60 * time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Sessions {
		t.Logf("utilisation 0.80: session %s meets the SLO for %.2f%% of simulated requests", s.Name, 100*s.SLOAttainment)
		if s.SLOAttainment >= 0.999 {
			t.Errorf("session %s: attainment %.4f at 0.8 already meets 99.9%%; the search had nothing to do", s.Name, s.SLOAttainment)
		}
	}
	t.Logf("utilisation %.2f: cost %.3f, %+.1f%% over the 0.8 plan's %.3f", plan.MaxUtilization, plan.TotalCost, 100*(plan.TotalCost/base.TotalCost-1), base.TotalCost)
	if plan.TotalCost <= base.TotalCost {
		t.Errorf("more headroom should cost more: %.3f vs %.3f", plan.TotalCost, base.TotalCost)
	}
	if _, _, err := PlanForBursts(cfg, planner.Options{}, BurstCheck{Target: 1.5, Seed: 1}); err == nil {
		t.Error("a target above 1 was accepted")
	}
}

// A config whose only session cannot be planned comes back as the planner
// made it, the session's error saying why, not as "nothing to simulate".
func TestPlanForBurstsNothingPlanned(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sessions = cfg.Sessions[:1]
	cfg.Sessions[0].SLO = api.Duration(time.Millisecond) // shorter than any profiled duration
	plan, rep, err := PlanForBursts(cfg, planner.Options{}, BurstCheck{Target: 0.999, Seed: 1})
	if plan == nil || len(plan.Sessions) != 1 || plan.Sessions[0].Error == "" {
		t.Fatalf("plan %+v (err %v), want the session with its planning error", plan, err)
	}
	if rep != nil || (err != nil && strings.Contains(err.Error(), "simulat")) {
		t.Errorf("report %v, err %v: want no report and no simulation error", rep, err)
	}
}

// Each session gets the headroom its own simulation needs: beside the demo's
// session, which needs more than the first cap, a copy of it with four times
// the SLO keeps the first cap, and costs what it costs planned alone there.
func TestPlanForBurstsPerSession(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	slack := cfg.Sessions[0]
	slack.Name, slack.SLO = "slack", 4*slack.SLO
	cfg.Sessions = append(cfg.Sessions, slack)
	tight := cfg.Sessions[0].Name
	plan, rep, err := PlanForBursts(cfg, planner.Options{}, BurstCheck{Target: 0.999, Seed: 1, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	if plan.MaxUtilization != Utilizations[0] {
		t.Errorf("plan's cap %.2f, want the first, %.2f, which the slack session meets", plan.MaxUtilization, Utilizations[0])
	}
	for _, sp := range plan.Sessions {
		u := plan.Utilization(&sp)
		t.Logf("session %s: cap %.2f, cost %.3f", sp.Name, u, sp.Cost)
		switch sp.Name {
		case tight:
			if sp.MaxUtilization == 0 || sp.MaxUtilization >= Utilizations[0] {
				t.Errorf("session %s: own cap %.2f, want one below %.2f", sp.Name, sp.MaxUtilization, Utilizations[0])
			}
		case "slack":
			if sp.MaxUtilization != 0 {
				t.Errorf("session slack: own cap %.2f, want the plan's", sp.MaxUtilization)
			}
		}
		one := &api.Config{Hardware: cfg.Hardware, Profiles: cfg.Profiles}
		s, _ := cfg.Session(sp.Name)
		one.Sessions = []api.Session{*s}
		alone, err := planner.Plan(one, planner.Options{MaxUtilization: u})
		if err != nil {
			t.Fatal(err)
		}
		if d := alone.TotalCost - sp.Cost; d > 1e-9 || d < -1e-9 {
			t.Errorf("session %s: cost %.4f, want %.4f as planned alone at %.2f", sp.Name, sp.Cost, alone.TotalCost, u)
		}
	}
	for _, s := range rep.Sessions {
		if s.SLOAttainment < 0.999 {
			t.Errorf("session %s: simulated attainment %.4f below the target", s.Name, s.SLOAttainment)
		}
	}
	if err := planner.Verify(cfg, plan); err != nil {
		t.Errorf("the plan fails its check: %v", err)
	}
}

// The burst check simulates the dispatch the plan is served with:
// InferLine's plan of the demo's chain meets the target at 0.9 under TC, but
// it is served round-robin, where 0.9 refuses about a tenth; checked under
// RR it is planned with more headroom, and meets the target under RR.
func TestPlanForBurstsServedDispatch(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := planner.Options{Policy: "inferline"}
	tc, _, err := PlanForBursts(cfg, opts, BurstCheck{Target: 0.999, Seed: 1, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	rr, rep, err := PlanForBursts(cfg, opts, BurstCheck{Target: 0.999, Seed: 1, Admission: true, Dispatch: dispatcher.RR{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked under TC: cap %.2f, cost %.2f; under RR: cap %.2f, cost %.2f", tc.MaxUtilization, tc.TotalCost, rr.MaxUtilization, rr.TotalCost)
	if !(rr.MaxUtilization < tc.MaxUtilization) {
		t.Errorf("cap under RR %.2f, want below the %.2f TC passes at", rr.MaxUtilization, tc.MaxUtilization)
	}
	for _, s := range rep.Sessions {
		if s.SLOAttainment < 0.999 {
			t.Errorf("session %s: %.4f under RR, below the target", s.Name, s.SLOAttainment)
		}
	}
}
