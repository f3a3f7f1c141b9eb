package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// TestPolicyRegistry adds a baseline to the built-in policies, plans with it,
// and checks the errors: an unknown name lists the allowed ones, a taken name or
// a bad knob is refused.
func TestPolicyRegistry(t *testing.T) {
	even, err := NewPlanningPolicy("even-2d", PolicySpec{Model: RoundRobin, Split: "even", MaxConfigs: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := BuiltinPolicies().With(even)
	if err != nil {
		t.Fatal(err)
	}
	cfg := withSessions(tableI(), m1Session(285, 2*time.Second))
	p, err := Plan(cfg, Options{Policy: "even-2d", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if p.Policy != "even-2d" || p.LatencyModel != "rr-2d" || p.TotalCost <= 0 {
		t.Errorf("plan by the registered baseline: policy %q model %q cost %v", p.Policy, p.LatencyModel, p.TotalCost)
	}
	// The optimum accepts the new policy as its reference.
	if _, err := Plan(cfg, Options{Policy: "optimal", Reference: "even-2d", Registry: reg}); err != nil {
		t.Errorf("optimal under even-2d: %v", err)
	}
	// The default registry does not know it, and says what it knows.
	_, err = Plan(cfg, Options{Policy: "even-2d"})
	if err == nil || !strings.Contains(err.Error(), "allowed: piccolo, paper, nexus, scrooge, inferline, clipper, optimal") {
		t.Errorf("unknown policy: %v, want the allowed names", err)
	}
	for _, tc := range []struct {
		name string
		spec PolicySpec
		want string
	}{
		{"piccolo", PolicySpec{}, `two policies are called "piccolo"`},
		{"", PolicySpec{}, "empty name"},
		{"x", PolicySpec{Split: "fastest"}, "allowed: lc, throughput"},
		{"x", PolicySpec{MaxConfigs: -1}, "max configs"},
		{"x", PolicySpec{MaxUtilization: 2}, "max utilization"},
		{"x", PolicySpec{Reassign: -2}, "reassign"},
	} {
		p, err := NewPlanningPolicy(tc.name, tc.spec)
		if err == nil {
			_, err = reg.With(p)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("policy %q %+v: %v, want an error containing %q", tc.name, tc.spec, err, tc.want)
		}
	}
	if got := len(reg.Names()); got != len(Policies)+1 {
		t.Errorf("%d names after the refused policies, want %d", got, len(Policies)+1)
	}
}

// A session's own cap replaces the plan's for that session only, is recorded
// in its plan, and must be in (0, 1].
func TestSessionUtilization(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	name := cfg.Sessions[0].Name
	at8, err := Plan(cfg, Options{MaxUtilization: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	own, err := Plan(cfg, Options{MaxUtilization: 0.9, SessionUtilization: map[string]float64{name: 0.8}})
	if err != nil {
		t.Fatal(err)
	}
	if own.MaxUtilization != 0.9 || own.Sessions[0].MaxUtilization != 0.8 || own.TotalCost != at8.TotalCost {
		t.Errorf("plan cap %.2f, session cap %.2f, cost %.4f; want 0.9, 0.8 and the 0.8 plan's cost %.4f",
			own.MaxUtilization, own.Sessions[0].MaxUtilization, own.TotalCost, at8.TotalCost)
	}
	if err := Verify(cfg, own); err != nil {
		t.Errorf("the plan fails its check: %v", err)
	}
	if _, err := Plan(cfg, Options{SessionUtilization: map[string]float64{name: 1.5}}); err == nil || !strings.Contains(err.Error(), "must be in (0, 1]") {
		t.Errorf("cap 1.5: error %v, want one saying the cap must be in (0, 1]", err)
	}
}
