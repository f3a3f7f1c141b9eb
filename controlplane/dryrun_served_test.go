package controlplane

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/simulate"
)

// TestDryRunSimulatesAsServed: a dry run's simulated attainment runs the plan
// under the gateway's own dispatch, flush and admission (AdminOptions.Served),
// not the simulator's defaults: on the demo's chain planned with no headroom
// at all (cap 1), the served options and the defaults give different
// attainments, and the dry run's is the served one's.
func TestDryRunSimulatesAsServed(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{Policy: "nexus", MaxUtilization: 1})
	if err != nil {
		t.Fatal(err)
	}
	served := simulate.Options{Policy: dispatcher.RR{}, Flush: dispatcher.FlushIdle, Admission: true}
	got := simulatedAttainment(plan, served)["paper-chain"]
	def := simulatedAttainment(plan, simulate.Options{})["paper-chain"]
	rep, err := simulate.Run(plan, simulate.Options{Policy: dispatcher.RR{}, Flush: dispatcher.FlushIdle, Admission: true,
		Arrival: "poisson", Duration: simulate.BurstDuration, MaxItems: simulate.BurstItems, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := rep.Sessions[0].SLOAttainment
	t.Logf("served %.4f, defaults %.4f, direct %.4f", got, def, want)
	if got == def {
		t.Fatalf("served and default options both simulate %.4f; the case does not tell them apart", got)
	}
	if d := got - want; d > 1e-4 || d < -1e-4 {
		t.Errorf("dry run simulated %.4f; the plan served round-robin with the idle flush and admission simulates %.4f", got, want)
	}
}
