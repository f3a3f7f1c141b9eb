package simulate

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

// TestRefereePlannerLatencyModel is the simulator refereeing the planner: plans of
// the TC policies (piccolo, paper, and the optimum under piccolo's model), simulated
// with the real dispatcher under constant arrivals at the planned rates, must keep
// every request within the plan's session latency (so within the SLO), and every
// item of a source module within its module's WCL. Items of downstream modules
// must stay within their WCL (which includes the parents' burst, burstOf) plus a
// stated tolerance, one batch duration of the module's slowest group: the wait
// for a lane after a burst, which the latency model leaves out (measured: the
// worst module, w3/m4, batch 1, peaks at +47% of its 4.5 ms WCL, 2.1 ms over it,
// within its 2.8 ms batch); the test fails beyond it.
func TestRefereePlannerLatencyModel(t *testing.T) {
	cfg, err := api.Load("../configs/paper/profiles.yaml", "../configs/paper/sessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  *api.Config
	}{{"paper-examples", cfg}}
	for i, w := range planner.GenerateWorkloads(3, 6, planner.DefaultWorkloadSpec) {
		cases = append(cases, struct {
			name string
			cfg  *api.Config
		}{fmt.Sprintf("workload-%d", i), w})
	}
	over, items, refereed := 0, 0, 0
	worst := 0.0 // the largest (max − WCL)/WCL of a module
	for _, tc := range cases {
		for _, policy := range []string{"piccolo", "paper", "optimal"} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				plan, err := planner.Plan(tc.cfg, planner.Options{Policy: policy})
				switch {
				case err != nil && (tc.name == "paper-examples" || !errors.Is(err, planner.ErrInfeasible)):
					t.Fatalf("not planned: %v", err)
				case err != nil:
					// A random workload's SLO may be out of reach; that is the
					// planner's answer, not a pass (refereed counts the rest).
					t.Logf("infeasible, nothing to referee: %v", err)
					return
				}
				refereed++
				r, err := Run(plan, Options{Policy: dispatcher.TC{}, Arrival: "constant", Duration: 20 * time.Second, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				for si, s := range r.Sessions {
					if s.Completed != s.Requests || len(s.Errors) > 0 {
						t.Errorf("session %s: %d of %d completed, errors %v", s.Name, s.Completed, s.Requests, s.Errors)
					}
					if s.Latency.MaxMs > s.PlanLatencyMs+1e-6 {
						t.Errorf("session %s: max latency %.1fms over the plan's %.1fms (SLO %.0fms)", s.Name, s.Latency.MaxMs, s.PlanLatencyMs, s.SLOMs)
					}
					for mi, m := range s.Modules {
						items += m.Items
						over += m.OverWCL
						mp := &plan.Sessions[si].Modules[mi]
						source := len(mp.After) == 0
						// A downstream item may wait, beyond its WCL, for one
						// batch of its group already running: the wait behind a
						// lane after a parent's burst, which the latency model
						// leaves out (docs/planner.md, "What the WCL leaves out").
						tol := 0.0
						for _, g := range mp.Configs {
							tol = max(tol, g.DurationMs)
						}
						worst = max(worst, (m.Latency.MaxMs-m.WCLMs)/m.WCLMs)
						switch {
						case m.OverWCL > 0 && source:
							t.Errorf("session %s source module %s: %d of %d items over the WCL %.1fms (max %.1fms)", s.Name, m.Name, m.OverWCL, m.Items, m.WCLMs, m.Latency.MaxMs)
						case m.Latency.MaxMs > m.WCLMs+tol+1e-3:
							t.Errorf("session %s downstream module %s: max %.2fms over its WCL %.2fms plus one batch duration %.2fms (%d of %d items over the WCL)", s.Name, m.Name, m.Latency.MaxMs, m.WCLMs, tol, m.OverWCL, m.Items)
						case m.OverWCL > 0:
							t.Logf("session %s downstream module %s: %d of %d items over the WCL %.1fms (max %.1fms, within one batch duration %.2fms)", s.Name, m.Name, m.OverWCL, m.Items, m.WCLMs, m.Latency.MaxMs, tol)
						}
					}
				}
			})
		}
	}
	t.Logf("downstream items over their module WCL: %d of %d (%.2f%%); the worst module's max is %+.0f%% of its WCL", over, items, 100*float64(over)/float64(max(items, 1)), 100*worst)
	// The paper examples (3 policies) and most random workloads must be refereed.
	if want := 3 * len(cases) * 2 / 3; refereed < want {
		t.Errorf("only %d of %d plans refereed, want at least %d", refereed, 3*len(cases), want)
	}
}
