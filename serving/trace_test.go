package serving

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// TestTracePlannerReplanKeepsBursts: at the config's rate the trace planner
// serves `piccolo plan --trace`'s plan; a re-plan at a measured envelope twice
// the trace's plans for the trace played twice as fast, so its plan keeps the
// burst headroom (it costs what the trace plan at twice the rate costs, well
// above the mean-rate plan at twice the rate).
func TestTracePlannerReplanKeepsBursts(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr := demoGamma(t, 120*time.Second)
	opts := planner.Options{Policy: "piccolo"}
	load := simulate.Options{Seed: 1, Flush: dispatcher.FlushIdle}
	var tables strings.Builder
	tp, err := NewTracePlanner(cfg, TracePlannerOptions{Trace: tr, Options: opts, Load: load, Tables: &tables})
	if err != nil {
		t.Fatal(err)
	}
	load.Trace = tr
	want, err := simulate.PlanForTraceWith("ladder", cfg, opts, 0.99, load)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.TotalCost != want.Trace.Plan.TotalCost {
		t.Errorf("at the config's rate: cost %.4g, want the trace plan's %.4g", got.TotalCost, want.Trace.Plan.TotalCost)
	}
	if !strings.Contains(tables.String(), "trace (chosen)") {
		t.Errorf("tables: %q, want the comparison", tables.String())
	}

	// The envelope the rate monitor would measure on this trace, doubled.
	_, mean := tr.MeanRate(0)
	env := tp.Envelope()
	if want := tr.PeakRate(replan.EnvelopeWindow(900*time.Millisecond, 50), 0); env != want {
		t.Errorf("envelope %.4g req/s, want the busiest monitor window %.4g", env, want)
	}
	keys := map[replan.ModuleKey]float64{{Session: "paper-chain", Module: "m2"}: 50, {Session: "paper-chain", Module: "m3"}: 50}
	if c := tp.Covers(keys); c[replan.ModuleKey{Session: "paper-chain", Module: "m3"}] != env {
		t.Errorf("covers at the config's rates: %v, want both modules at the envelope %.4g", c, env)
	}
	if env < 1.2*mean {
		t.Fatalf("envelope %.4g req/s of a CV² 16 trace whose mean is %.4g: want well above the mean", env, mean)
	}
	if s := tp.Scale(2 * env); s < 1.99 || s > 2.01 {
		t.Errorf("scale at twice the trace's envelope: %.4g, want 2", s)
	}
	measured := replan.WithRates(cfg, map[replan.ModuleKey]float64{{Session: "paper-chain", Module: "m2"}: 2 * env, {Session: "paper-chain", Module: "m3"}: 2 * env})
	replan, err := tp.Plan(measured)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := tr.Window(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	load.Trace = fast
	twice, err := simulate.PlanForTraceWith("ladder", cfg, opts, 0.99, load)
	if err != nil {
		t.Fatal(err)
	}
	if replan.TotalCost != twice.Trace.Plan.TotalCost {
		t.Errorf("re-plan at twice the envelope: cost %.4g, want the trace plan of the trace ×2, %.4g", replan.TotalCost, twice.Trace.Plan.TotalCost)
	}
	if replan.TotalCost < 1.3*twice.Mean.Plan.TotalCost {
		t.Errorf("re-plan at twice the envelope: cost %.4g, want the burst provisioning, well above the mean-rate plan's %.4g", replan.TotalCost, twice.Mean.Plan.TotalCost)
	}
	t.Logf("trace plan %.4g; re-plan at 2× envelope (%.4g req/s): %.4g; mean-rate plan at 2× mean: %.4g", got.TotalCost, 2*env, replan.TotalCost, twice.Mean.Plan.TotalCost)
}

// TestTracePlannerPipelineScope: with Scope pipeline (`--tune-scope
// pipeline`) the trace planner serves the coarse-grained plan, the same
// whole number of replicas for every module, as simulate.PlanCoarse makes it;
// an unknown scope is an error naming the allowed ones.
func TestTracePlannerPipelineScope(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr := demoGamma(t, 60*time.Second)
	opts := planner.Options{Policy: "piccolo"}
	load := simulate.Options{Seed: 1, Flush: dispatcher.FlushIdle}
	if _, err := NewTracePlanner(cfg, TracePlannerOptions{Trace: tr, Options: opts, Load: load, Scope: "modules"}); err == nil ||
		!strings.Contains(err.Error(), `"modules"`) || !strings.Contains(err.Error(), "module, pipeline") {
		t.Errorf("scope \"modules\": error %v; want one naming it and module, pipeline", err)
	}
	tp, err := NewTracePlanner(cfg, TracePlannerOptions{Trace: tr, Options: opts, Load: load, Scope: replan.ScopePipeline})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	load.Trace = tr
	want, _, err := simulate.PlanCoarse(cfg, 0.99, load)
	if err != nil {
		t.Fatal(err)
	}
	if got.TotalCost != want.Plan.TotalCost {
		t.Errorf("pipeline scope: cost %.4g; want the coarse-grained plan's %.4g", got.TotalCost, want.Plan.TotalCost)
	}
	if n := len(got.Sessions[0].Modules); n < 2 {
		t.Fatalf("pipeline scope: %d modules; the check below needs two or more", n)
	}
	replicas := -1.0
	for _, mp := range got.Sessions[0].Modules {
		n := 0.0
		for _, g := range mp.Configs {
			n += g.Machines
		}
		if replicas >= 0 && n != replicas || n != float64(int(n)) {
			t.Errorf("module %s on %.4g machines, another on %.4g; want the same whole number of pipeline replicas", mp.Name, n, replicas)
		}
		replicas = n
		t.Logf("module %s: %.0f replicas on %s", mp.Name, n, mp.Configs[0].Hardware)
	}
}

// demoGamma records d of gamma CV² 16 arrivals at the demo chain's 50
// req/s (seed 1).
func demoGamma(t *testing.T, d time.Duration) *arrival.Trace {
	t.Helper()
	proc, err := arrival.Spec{Kind: "gamma", Rate: 50, CV2: 16}.New(1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(proc, d, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
