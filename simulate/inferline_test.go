package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

func gammaTrace(t testing.TB, rate, cv2 float64, horizon time.Duration) *arrival.Trace {
	t.Helper()
	p, err := arrival.Spec{Kind: "gamma", Rate: rate, CV2: cv2}.New(1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(p, horizon, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// InferLine's planner on a bursty trace of the demo's chain: its plan meets
// the target when simulated again, and it ends as §4.3 promises — no single
// RemoveReplica or DowngradeHW lowers the cost and stays feasible. The
// coarse-grained plan replicates the whole pipeline and also meets the target.
func TestInferLinePlannerEndsAtALocalMinimum(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	load := Options{Trace: gammaTrace(t, 50, 16, 120*time.Second), Seed: 1, Flush: dispatcher.FlushIdle}
	run, stats, err := PlanInferLine(cfg, 0.99, load)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("InferLine: cost %.3f, attainment %.4f, %d simulations, moves %v", run.Plan.TotalCost, run.Attainment, stats.Simulations, stats.Moves)
	if run.Attainment < 0.99 {
		t.Errorf("attainment %.4f, want ≥ 0.99", run.Attainment)
	}
	if len(stats.Moves) == 0 {
		t.Error("no move taken from Algorithm 1's plan")
	}
	il, err := newInferLine(cfg, 0.99, load)
	if err != nil {
		t.Fatal(err)
	}
	// Read the final state back from the plan.
	st := make([]ilChoice, len(il.mods))
	for i, mp := range run.Plan.Sessions[0].Modules {
		g := mp.Configs[0]
		if mp.Name != il.mods[i].mod.Name {
			t.Fatalf("module %d is %q, want %q", i, mp.Name, il.mods[i].mod.Name)
		}
		for h, o := range il.mods[i].options {
			if o.hw.Name != g.Hardware {
				continue
			}
			st[i].hw = h
			for b, e := range o.entries {
				if e.Batch == g.Batch {
					st[i].batch = b
				}
			}
		}
		st[i].replicas = int(g.Machines)
		if float64(st[i].replicas) != g.Machines {
			t.Errorf("%s: %v machines, want whole replicas", mp.Name, g.Machines)
		}
	}
	if !il.feasible(st) {
		t.Fatalf("the plan returned is not feasible when simulated again: %v", st)
	}
	for i := range st {
		if st[i].replicas > 1 {
			next := slices.Clone(st)
			next[i].replicas--
			if il.feasible(next) {
				t.Errorf("%s: one replica fewer (%d) is still feasible and cheaper", il.mods[i].mod.Name, next[i].replicas)
			}
		}
		if st[i].hw > 0 {
			if next, ok := il.downgrade(st, i); ok {
				t.Errorf("%s: a hardware downgrade to %v is feasible and cheaper", il.mods[i].mod.Name, next[i])
			}
		}
	}

	coarse, _, err := PlanCoarse(cfg, 0.99, load)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("coarse-grained: cost %.3f, attainment %.4f", coarse.Plan.TotalCost, coarse.Attainment)
	mods := coarse.Plan.Sessions[0].Modules
	for _, m := range mods[1:] {
		if m.Configs[0].Machines != mods[0].Configs[0].Machines || m.Configs[0].Batch != 1 {
			t.Errorf("coarse-grained %s: b%d ×%v, want b1 ×%v like every module", m.Name, m.Configs[0].Batch, m.Configs[0].Machines, mods[0].Configs[0].Machines)
		}
	}
	if coarse.Attainment < 0.99 {
		t.Errorf("coarse-grained attainment %.4f, want ≥ 0.99", coarse.Attainment)
	}
}

func TestInferLinePlannerErrors(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr := gammaTrace(t, 50, 1, 10*time.Second)
	tight := *cfg
	tight.Sessions = slices.Clone(cfg.Sessions)
	tight.Sessions[0].SLO = api.Duration(200 * time.Millisecond)
	for _, tc := range []struct {
		name   string
		cfg    *api.Config
		target float64
		o      Options
		want   string
	}{
		{"no trace", cfg, 0.99, Options{}, "no trace given"},
		{"target", cfg, 1.5, Options{Trace: tr}, "attainment target 1.5: must be in (0, 1]"},
		{"session", cfg, 0.99, Options{Trace: tr, Session: "x"}, `trace session "x": not in the config`},
		{"slo below the service time", &tight, 0.99, Options{Trace: tr}, "service time 230ms on the fastest hardware at batch 1 reaches the SLO 200ms"},
	} {
		if _, _, err := PlanInferLine(tc.cfg, tc.target, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := PlanForTraceWith("greedy", cfg, planner.Options{}, 0.99, Options{Trace: tr}); err == nil || !strings.Contains(err.Error(), `trace search "greedy": allowed: ladder, inferline`) {
		t.Errorf("unknown search: %v", err)
	}
	tp, err := PlanForTraceWith("inferline", cfg, planner.Options{}, 0.99, Options{Trace: tr, Flush: dispatcher.FlushIdle})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	tp.WriteTable(&b)
	for _, want := range []string{"trace, InferLine search (chosen;", "trace, ladder search", "mean rate", "peak"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// An InferLine plan is a plan `piccolo gateway --plan` serves: it passes
// planner.Verify against the config at its rates. (Until 2026-11-26 its
// module WCLs left out the parents' burst, and the gateway refused the
// gamma CV² 4 plan of docs/traffic.md's table: "m3: WCL 130ms ≠ max over
// groups 130ms + parents' burst 19.2674ms".)
func TestInferLinePlanPassesCheck(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, cv2 := range []float64{4, 16} {
		run, _, err := PlanInferLine(cfg, 0.99, Options{Trace: gammaTrace(t, 50, cv2, 120*time.Second), Seed: 1, Flush: dispatcher.FlushIdle})
		if err != nil {
			t.Fatal(err)
		}
		at := withSessionRate(cfg, 0, run.Plan.Sessions[0].Modules[0].Rate)
		if err := planner.Verify(at, run.Plan); err != nil {
			t.Errorf("gamma CV² %g: the InferLine plan fails its check: %v", cv2, err)
		}
	}
}
