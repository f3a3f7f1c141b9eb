package scheduler

import (
	"math"
	"testing"
)

// TestPlannerOnRandomWorkloads plans a seeded sample of the benchmark's workloads
// with every variant: every plan passes its independent check (RunPlannerBench
// fails otherwise), piccolo plans every workload its optimum plans, no policy beats
// the exhaustive optimum of its own model by more than the optimum's grid allows,
// and piccolo is cheaper than paper on average.
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
	for _, name := range []string{"piccolo", "paper"} {
		r := rows[name]
		// The optimum searches dummy-rate splits on a grid of SLO/200, so a
		// policy may undercut it slightly; by more would mean a wrong optimum.
		if r.VsOptimal.N > 0 && r.VsOptimal.Avg < -0.005 {
			t.Errorf("%s is %.2f%% cheaper than its exhaustive optimum on average", name, -100*r.VsOptimal.Avg)
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
		if err := Check(cfg, p); err != nil {
			t.Fatal(err)
		}
	}
}
