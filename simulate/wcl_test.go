package simulate

import (
	"math"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

type hg struct {
	batch, conc    int
	durMs, machine float64
	rate           float64
}

// handPlan builds a one-module plan whose group WCLs follow Theorem 1
// (d + b/w, w = rate of the group and every group after it).
func handPlan(name string, realRate, dummy, budgetMs float64, groups ...hg) *api.Plan {
	mp := api.ModulePlan{Name: name, Model: name, Rate: realRate, DummyRate: dummy, BudgetMs: budgetMs}
	for i, g := range groups {
		var w float64
		for _, h := range groups[i:] {
			w += h.rate
		}
		wcl := g.durMs + 1000*float64(g.batch)/w
		mp.Configs = append(mp.Configs, api.GroupPlan{Hardware: "hw", Price: 1, Batch: g.batch, Concurrency: g.conc,
			DurationMs: g.durMs, Machines: g.machine, Rate: g.rate, WCLMs: wcl, Cost: g.machine,
			Throughput: float64(g.conc*g.batch) / g.durMs * 1000})
		mp.WCLMs = math.Max(mp.WCLMs, wcl)
		mp.Cost += g.machine
	}
	if mp.BudgetMs == 0 {
		mp.BudgetMs = mp.WCLMs
	}
	return &api.Plan{Policy: "hand", LatencyModel: "tc-theorem1", Sessions: []api.SessionPlan{{
		Name: name, SLOMs: mp.BudgetMs, LatencyMs: mp.WCLMs, Cost: mp.Cost, Modules: []api.ModulePlan{mp}}}}
}

// TestSimulatedLatencyWithinWCL is the simulator refereeing the planner's latency
// model: under constant arrivals at the planned rates, no item may take longer
// than its group's WCL. Both bounds are checked: Theorem 1 (d + b/w, what the
// plans record) and the exact collection time d + (b−1)/w.
func TestSimulatedLatencyWithinWCL(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan *api.Plan
	}{
		{"fig3", handPlan("fig3", 8, 0, 0, hg{6, 1, 2000, 2, 6}, hg{2, 1, 1000, 1, 2})},
		{"paper-m1-dummy", handPlan("m1", 285, 15, 2000, hg{100, 1, 1000, 3, 300})},
		{"fractional-multiplexed", handPlan("frac", 400, 0, 0, hg{8, 2, 100, 2.5, 350}, hg{4, 1, 50, 1, 50})},
		{"three-groups-headroom", handPlan("three", 300, 0, 0, hg{16, 1, 200, 3, 216}, hg{8, 1, 120, 1, 60}, hg{2, 1, 30, 0.5, 24})},
		{"chain-of-small", handPlan("small", 90, 10, 0, hg{4, 1, 40, 1, 100})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Run(tc.plan, Options{Policy: dispatcher.TC{}, Arrival: "constant", Duration: 60 * time.Second, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			s := r.Sessions[0]
			m := s.Modules[0]
			if len(s.Errors) != 0 || s.Completed != s.Requests {
				t.Errorf("errors %v, %d of %d completed", s.Errors, s.Completed, s.Requests)
			}
			mp := tc.plan.Sessions[0].Modules[0]
			for i, g := range m.Groups {
				var w float64
				for _, h := range mp.Configs[i:] {
					w += h.Rate
				}
				gp := mp.Configs[i]
				exact := gp.DurationMs + 1000*float64(gp.Batch-1)/w
				tight := "neither"
				switch {
				case g.MaxMs > g.WCLMs+1e-6:
					tight = "VIOLATED"
				case math.Abs(g.MaxMs-exact) < 0.01:
					tight = "exact (b−1)/w"
				case math.Abs(g.MaxMs-g.WCLMs) < 0.01:
					tight = "theorem 1"
				case g.MaxMs > exact:
					tight = "between the bounds"
				}
				t.Logf("group %d (b%d d%.0fms m%.2g): %d items, max %.3f ms; theorem 1 %.3f ms, exact %.3f ms: %s",
					i, g.Batch, gp.DurationMs, g.Machines, g.Items, g.MaxMs, g.WCLMs, exact, tight)
				if g.MaxMs > g.WCLMs+1e-6 {
					t.Errorf("group %d: max latency %.3f ms exceeds its WCL %.3f ms (Theorem 1)", i, g.MaxMs, g.WCLMs)
				}
			}
			if m.OverWCL != 0 {
				t.Errorf("%d items over the module WCL %.3f ms (max %.3f ms)", m.OverWCL, m.WCLMs, m.Latency.MaxMs)
			}
		})
	}
}

// TestWCLBlindSpotAtFullUtilisation pins down where Theorem 1 does not hold: a
// group planned at exactly 100% of its machines' throughput. The module stream
// fills its batches faster than b/w (they collect from the whole stream), but the
// smooth round-robin over groups hands it batches at irregular spacing, and with no
// idle time a machine is sometimes still busy when the next batch is ready: the
// batch queues and its items exceed d + b/w. The planner avoids this with headroom
// (max_utilization < 1); the paper's proof assumes a machine is always free.
func TestWCLBlindSpotAtFullUtilisation(t *testing.T) {
	plan := handPlan("full", 300, 0, 0, hg{16, 1, 200, 3, 240}, hg{8, 1, 120, 1, 50}, hg{2, 1, 30, 0.5, 10})
	r, err := Run(plan, Options{Policy: dispatcher.TC{}, Duration: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g := r.Sessions[0].Modules[0].Groups[0]
	t.Logf("group 0 at 100%% utilisation: max %.3f ms, Theorem 1 WCL %.3f ms", g.MaxMs, g.WCLMs)
	if g.MaxMs <= g.WCLMs {
		t.Fatalf("max %.3f ms within the WCL: the blind spot is gone, update the docs and this test", g.MaxMs)
	}
	// The excess stays below one batch duration: queueing, not instability.
	if g.MaxMs > g.WCLMs+200 {
		t.Errorf("max %.3f ms exceeds the WCL by more than one batch duration", g.MaxMs)
	}
	if g.Items < 14400-16 || g.Items > 14400+16 {
		t.Errorf("group 0 ran %d items, want its planned share 240/300 of 18000 (± one batch)", g.Items)
	}
}
