package planner

import (
	"math"
	"testing"
)

// TestPlannerOnRandomWorkloads plans a seeded sample of the benchmark's workloads
// with every variant: every plan passes its independent check (RunPlannerBench
// fails otherwise), piccolo plans every workload its optimum plans, no variant is
// cheaper than the exhaustive optimum of its own model on any workload, and piccolo
// is cheaper than paper on average.
func TestPlannerOnRandomWorkloads(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 15
	}
	ws := GenerateWorkloads(11, n, DefaultWorkloadSpec)
	rep, err := RunPlannerBench(ws, BenchVariants(), 11, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	rows := map[string]BenchRow{}
	for _, r := range rep.Rows {
		rows[r.Name] = r
	}
	pic := rows["piccolo"]
	if pic.InfeasibleWhereOptimalOK != 0 {
		t.Errorf("piccolo failed %d workloads its optimum planned", pic.InfeasibleWhereOptimalOK)
	}
	if pic.VsPaper.N == 0 || pic.VsPaper.Avg >= 0 {
		t.Errorf("piccolo vs paper: average extra cost %.2f%% over %d workloads, want a saving", 100*pic.VsPaper.Avg, pic.VsPaper.N)
	}
	// No variant may undercut the exhaustive optimum of its own model on any
	// workload: the lowest extra, not the average, is what an optimum bounds.
	for _, r := range rep.Rows {
		if r.VsOptimal.N > 0 && r.VsOptimal.Min < -1e-6 {
			t.Errorf("%s is %.4f%% cheaper than its exhaustive optimum on one workload", r.Name, -100*r.VsOptimal.Min)
		}
	}
	if math.IsNaN(pic.VsOptimal.Avg) {
		t.Error("no comparison against the optimum")
	}
}

func BenchmarkPlanPiccolo5Modules(b *testing.B) {
	spec := DefaultWorkloadSpec
	spec.MinModules = 5
	ws := GenerateWorkloads(5, 64, spec)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Plan(ws[i%len(ws)], Options{}); err != nil && !isInfeasible(err) {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan100Modules(b *testing.B) {
	spec := DefaultWorkloadSpec
	spec.MinModules, spec.MaxModules = 100, 100
	ws := GenerateWorkloads(100, 4, spec)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Plan(ws[i%len(ws)], Options{}); err != nil && !isInfeasible(err) {
			b.Fatal(err)
		}
	}
}

// TestPlan100Modules checks that a 100-module DAG plans and passes its check; its
// speed is measured by BenchmarkPlan100Modules.
func TestPlan100Modules(t *testing.T) {
	spec := DefaultWorkloadSpec
	spec.MinModules, spec.MaxModules = 100, 100
	for _, cfg := range GenerateWorkloads(100, 2, spec) {
		p, err := Plan(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(cfg, p); err != nil {
			t.Fatal(err)
		}
	}
}
