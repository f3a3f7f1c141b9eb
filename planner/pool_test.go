package planner_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
)

// TestPlanFitsPool: the demo's paper-chain with every device 1.6× slower
// than profiled, at utilisation 0.8. Planned per type at its price, both
// modules go to v100 and need 9 v100 devices; the pool has 8 t4 and 6 v100.
// With Options.Pool the plan places on the pool with no device missing (a
// module's group split across t4 and v100), passes the independent Check
// (every group within its module's budget, the SLO on every path, true
// costs), and costs no less than the unbounded plan. A pool large enough
// gives the unbounded plan byte for byte.
func TestPlanFitsPool(t *testing.T) {
	base, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testharness.Slowed(base, 1.6)
	pool := map[string]int{"t4": 8, "v100": 6}
	missing := func(p *api.Plan) int {
		_, short, err := placement.Place(p, testharness.Members(pool), nil, placement.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return short.Missing()
	}
	free, err := planner.Plan(cfg, planner.Options{MaxUtilization: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	if missing(free) == 0 {
		t.Fatal("the plan without a pool places on 8 t4 and 6 v100: the test needs a plan short of devices")
	}
	fit, err := planner.Plan(cfg, planner.Options{MaxUtilization: 0.8, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if m := missing(fit); m != 0 {
		t.Errorf("with the pool the plan misses %d devices of the 8 t4 and 6 v100; want none", m)
	}
	if err := planner.Verify(cfg, fit); err != nil {
		t.Errorf("the fitted plan fails the check: %v", err)
	}
	if fit.TotalCost < free.TotalCost-1e-9 {
		t.Errorf("the fitted plan costs %.3f, less than the unbounded plan's %.3f: costs are not true", fit.TotalCost, free.TotalCost)
	}
	split := false
	for _, mp := range fit.Sessions[0].Modules {
		for _, g := range mp.Configs {
			split = split || g.Hardware != mp.Configs[0].Hardware
		}
	}
	if !split {
		t.Error("no module's groups split across types")
	}

	big, err := planner.Plan(cfg, planner.Options{MaxUtilization: 0.8, Pool: map[string]int{"t4": 8, "v100": 20}})
	if err != nil {
		t.Fatal(err)
	}
	big.RuntimeMs, free.RuntimeMs = 0, 0
	a, _ := json.Marshal(big)
	b, _ := json.Marshal(free)
	if string(a) != string(b) {
		t.Errorf("with a pool that holds the plan, the plan changed:\n%s\nwant\n%s", a, b)
	}
}

func TestPlanPoolRefusesNegative(t *testing.T) {
	base, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = planner.Plan(base, planner.Options{Pool: map[string]int{"t4": -1}})
	if err == nil || !strings.Contains(err.Error(), `"t4"`) {
		t.Fatalf("a pool of -1 t4: error %v; want one naming t4", err)
	}
}
