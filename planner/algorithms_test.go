package planner

import (
	"errors"
	"testing"
	"time"
)

// TestExportedAlgorithmsPaperM1 runs the exported algorithms on the paper's M1 at
// 285 req/s within 2 s (§II, §III-D): Algorithm 1 gives 2×b100 + 1×b20 + 0.1×b5
// (cost 3.1), the dummy generator adds 15 req/s for 3×b100 (cost 3.0).
func TestExportedAlgorithmsPaperM1(t *testing.T) {
	cfg := tableI()
	cands, err := Candidates(cfg, "m1")
	if err != nil {
		t.Fatal(err)
	}
	p := ConfigParams{Model: TheoremOne}
	cs, err := GenerateConfigs(cands, 285, 2, p)
	if err != nil {
		t.Fatal(err)
	}
	var got []wantGroup
	for _, g := range cs.Groups {
		got = append(got, wantGroup{g.Config.Batch, g.Machines})
	}
	if want := []wantGroup{{100, 2}, {20, 1}, {5, 0.1}}; !sameGroups(got, want) || !near(cs.Cost, 3.1) {
		t.Errorf("GenerateConfigs: %v cost %.4f, want %v cost 3.1", got, cs.Cost, want)
	}
	d, err := GenerateDummy(cands, 285, 2, p)
	if err != nil {
		t.Fatal(err)
	}
	if !near(d.DummyRate, 15) || !near(d.Cost, 3) || len(d.Groups) != 1 || d.Groups[0].Config.Batch != 100 {
		t.Errorf("GenerateDummy: %+v, want 15 req/s of dummies and 3×b100 (cost 3)", d)
	}
	if _, err := GenerateConfigs(cands, 285, 0.05, p); !errors.Is(err, ErrInfeasible) {
		t.Errorf("GenerateConfigs within 50ms: %v, want ErrInfeasible", err)
	}
	for _, bad := range []ConfigParams{{MaxUtilization: 1.5}, {MaxConfigs: -1}} {
		if _, err := GenerateConfigs(cands, 285, 2, bad); err == nil {
			t.Errorf("GenerateConfigs with %+v: no error", bad)
		}
	}

	// Algorithm 2 on one module gives it the whole SLO; Reassign keeps a set that
	// already fits and never raises the cost.
	s := m1Session(285, 2*time.Second)
	budgets, err := SplitLatency(cfg, &s, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(budgets) != 1 || !near(budgets[0], 2) {
		t.Errorf("SplitLatency: %v, want [2]", budgets)
	}
	slow, err := GenerateConfigs(cands, 285, 0.5, p)
	if err != nil {
		t.Fatal(err)
	}
	re, err := Reassign(cfg, &s, []ConfigSet{slow}, p)
	if err != nil {
		t.Fatal(err)
	}
	if !(re[0].Cost < slow.Cost-tol) || re[0].WCL > 2+tol {
		t.Errorf("Reassign: cost %.4f WCL %.3fs from cost %.4f, want cheaper within 2s", re[0].Cost, re[0].WCL, slow.Cost)
	}
}
