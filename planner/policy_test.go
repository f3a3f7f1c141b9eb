package planner

import (
	"strings"
	"testing"
	"time"
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
