package scheduler

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// slowedConfig returns cfg with every profile entry k× slower: the profiles
// a calibration of devices all k× slower than profiled gives.
func slowedConfig(cfg *api.Config, k float64) *api.Config {
	out := *cfg
	out.Profiles = nil
	for _, p := range cfg.Profiles {
		p.Entries = append([]api.ProfileEntry(nil), p.Entries...)
		for i := range p.Entries {
			p.Entries[i].Duration = api.Duration(time.Duration(k * float64(p.Entries[i].Duration)))
		}
		out.Profiles = append(out.Profiles, p)
	}
	return &out
}

// TestPlanFitsPool: the demo's paper-chain with every device 1.6× slower
// than profiled, at utilisation 0.8. Planned per type at its price, both
// modules go to v100 and need 8 v100 devices; the pool has 8 t4 and 6 v100.
// With Options.Pool the plan needs at most the devices listed per type (a
// module's group split across t4 and v100), passes the independent Check
// (every group within its module's budget, the SLO on every path, true
// costs), and costs no less than the unbounded plan. A pool large enough
// gives the unbounded plan byte for byte.
func TestPlanFitsPool(t *testing.T) {
	base, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := slowedConfig(base, 1.6)
	pool := map[string]int{"t4": 8, "v100": 6}
	free, err := Plan(cfg, Options{MaxUtilization: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	if need := devicesNeeded(planGroupsOf(&free.Sessions[0])); need["v100"] <= pool["v100"] {
		t.Fatalf("the plan without a pool needs %d v100: the test needs a plan short of v100 (%d)", need["v100"], pool["v100"])
	}
	fit, err := Plan(cfg, Options{MaxUtilization: 0.8, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	need := devicesNeeded(planGroupsOf(&fit.Sessions[0]))
	for hw, have := range pool {
		if need[hw] > have {
			t.Errorf("with the pool the plan needs %d %s devices; the pool has %d", need[hw], hw, have)
		}
	}
	if err := Check(cfg, fit); err != nil {
		t.Errorf("the fitted plan fails the check: %v", err)
	}
	if fit.TotalCost < free.TotalCost-1e-9 {
		t.Errorf("the fitted plan costs %.3f, less than the unbounded plan's %.3f: costs are not true", fit.TotalCost, free.TotalCost)
	}
	types := map[string]bool{}
	for _, mp := range fit.Sessions[0].Modules {
		for _, g := range mp.Configs {
			types[mp.Name+"/"+g.Hardware] = true
		}
	}
	if len(types) < 3 {
		t.Errorf("no module split across types: %v", types)
	}

	big, err := Plan(cfg, Options{MaxUtilization: 0.8, Pool: map[string]int{"t4": 8, "v100": 20}})
	if err != nil {
		t.Fatal(err)
	}
	big.RuntimeMs, free.RuntimeMs = 0, 0
	if a, b := planJSON(t, big), planJSON(t, free); a != b {
		t.Errorf("with a pool that holds the plan, the plan changed:\n%s\nwant\n%s", a, b)
	}
}

func TestPlanPoolRefusesNegative(t *testing.T) {
	base, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(base, Options{Pool: map[string]int{"t4": -1}})
	if err == nil || !strings.Contains(err.Error(), `"t4"`) {
		t.Fatalf("a pool of -1 t4: error %v; want one naming t4", err)
	}
}

func planJSON(t *testing.T, p *api.Plan) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
