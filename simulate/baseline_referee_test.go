package simulate

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

// TestRefereeBaselinesOwnDispatch simulates each baseline's plan with its own
// dispatch: round-robin per item over the machines, each batching its own
// items (dispatcher.RR), for the 2d baselines (Nexus, InferLine, Clipper) and
// for Scrooge, whose local queues (a queue per machine, fed by the router)
// are what RR does (its d + b/t assumes each machine fed at its throughput).
// Constant arrivals at the planned rates, the paper's examples and six random
// workloads. It pins the known limit of these latency models (docs/planner.md,
// "Known limits"): a machine fed below its throughput collects its batch more
// slowly than the model assumes, and items wait for the deadline flush, far
// over the WCL but within the module budget; under 2d, a machine run at full
// throughput also queues batches, and a few items finish past their budget
// (by at most one batch duration) or miss their deadline.
func TestRefereeBaselinesOwnDispatch(t *testing.T) {
	cfg, err := api.Load("../configs/paper/profiles.yaml", "../configs/paper/sessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgs := append([]*api.Config{cfg}, planner.GenerateWorkloads(3, 6, planner.DefaultWorkloadSpec)...)
	for _, policy := range []string{"nexus", "inferline", "clipper", "scrooge"} {
		t.Run(policy, func(t *testing.T) {
			over, items, failed, requests, plans := 0, 0, 0, 0, 0
			worst := 0.0
			for ci, c := range cfgs {
				plan, err := planner.Plan(c, planner.Options{Policy: policy})
				if err != nil {
					continue // one hardware type, or the SLO out of reach: not planned
				}
				plans++
				r, err := Run(plan, Options{Policy: dispatcher.RR{}, Arrival: "constant", Duration: 20 * time.Second, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				for si, s := range r.Sessions {
					if s.Skipped != "" {
						continue
					}
					requests += s.Requests
					failed += s.Requests - s.Completed
					if s.Latency.MaxMs > s.SLOMs {
						t.Errorf("config %d session %s: max latency %.1fms over its SLO %.0fms", ci, s.Name, s.Latency.MaxMs, s.SLOMs)
					}
					for mi, m := range s.Modules {
						items += m.Items
						over += m.OverWCL
						worst = max(worst, (m.Latency.MaxMs-m.WCLMs)/m.WCLMs)
						d := 0.0
						for _, g := range plan.Sessions[si].Modules[mi].Configs {
							d = max(d, g.DurationMs)
						}
						if m.Latency.MaxMs > m.BudgetMs+d+1e-3 {
							t.Errorf("config %d %s/%s: max %.2fms over its budget %.2fms plus a batch duration %.2fms", ci, s.Name, m.Name, m.Latency.MaxMs, m.BudgetMs, d)
						}
					}
				}
			}
			t.Logf("%s under round-robin: %d plans, %d of %d items over their module WCL (%.1f%%), worst module max %+.0f%% of its WCL; %d of %d requests failed (deadline)",
				policy, plans, over, items, 100*float64(over)/float64(max(items, 1)), 100*worst, failed, requests)
			if plans < 4 {
				t.Errorf("only %d plans refereed", plans)
			}
			// The known limit, pinned: if it went away, docs/planner.md must say so.
			if over == 0 || worst < 1 {
				t.Errorf("%s: %d items over WCL, worst %+.0f%%: the known violation of its latency model under its own dispatch (items waiting for the deadline flush, several times the WCL) is gone; update docs/planner.md", policy, over, 100*worst)
			}
			// Few requests fail: the deadline flush caps the wait, and only a
			// machine at full throughput (InferLine, workload 3) misses deadlines.
			if float64(failed) > 0.03*float64(requests) {
				t.Errorf("%d of %d requests failed, want at most 3%%", failed, requests)
			}
		})
	}
}
