package planner

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// TestCheckRejectsWrongPlans feeds Check, the planner benchmark's correctness
// gate, plans made wrong one field at a time; each must fail with the violation
// named. The unmodified plan passes.
func TestCheckRejectsWrongPlans(t *testing.T) {
	cfg := withSessions(tableI(), api.Session{Name: "chain", SLO: api.Duration(900 * time.Millisecond), Modules: []api.Module{
		{Name: "m2", Model: "m2", Rate: 50}, {Name: "m3", Model: "m3", Rate: 40, After: []string{"m2"}},
	}})
	good, err := Plan(cfg, Options{Policy: "paper"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(cfg, good); err != nil {
		t.Fatalf("the planner's own plan fails: %v", err)
	}
	for _, tc := range []struct {
		name   string
		break_ func(p *api.Plan)
		want   string
	}{
		{"WCL over budget", func(p *api.Plan) {
			m := &p.Sessions[0].Modules[1]
			m.BudgetMs = m.WCLMs / 2
		}, "exceeds its budget"},
		{"budgets over the SLO", func(p *api.Plan) {
			for i := range p.Sessions[0].Modules {
				p.Sessions[0].Modules[i].BudgetMs = 900
			}
		}, "above the SLO"},
		{"rate not covered", func(p *api.Plan) { p.Sessions[0].Modules[0].Configs[0].Rate /= 2 }, "group rates add up to"},
		{"too few machines", func(p *api.Plan) {
			g := &p.Sessions[0].Modules[0].Configs[0]
			g.Machines /= 2
			g.Cost /= 2
		}, "less than its rate"},
		{"group cost misreported", func(p *api.Plan) { p.Sessions[0].Modules[0].Configs[0].Cost += 1 }, "≠ machines × price"},
		{"session cost misreported", func(p *api.Plan) { p.Sessions[0].Cost += 1 }, "≠ Σ module costs"},
		{"total cost misreported", func(p *api.Plan) { p.TotalCost -= 1 }, "total cost"},
		{"group WCL misreported", func(p *api.Plan) { p.Sessions[0].Modules[0].Configs[0].WCLMs -= 10 }, "recomputed"},
		{"parents' burst left out", func(p *api.Plan) {
			m := &p.Sessions[0].Modules[1]
			m.WCLMs = m.Configs[0].WCLMs
		}, "parents' burst"},
		{"session latency misreported", func(p *api.Plan) { p.Sessions[0].LatencyMs /= 2 }, "longest WCL path"},
		{"price not the catalog's", func(p *api.Plan) { p.Sessions[0].Modules[0].Configs[0].Price *= 2 }, "does not match the catalog"},
		{"throughput not c·b/d", func(p *api.Plan) { p.Sessions[0].Modules[0].Configs[0].Throughput *= 2 }, "c·b/d"},
		{"module rate not the config's", func(p *api.Plan) { p.Sessions[0].Modules[0].Rate = 10 }, "req/s, config"},
		{"negative dummy rate", func(p *api.Plan) { p.Sessions[0].Modules[0].DummyRate = -1 }, "negative dummy rate"},
		{"unknown latency model", func(p *api.Plan) { p.LatencyModel = "fast" }, "unknown latency model"},
		{"unknown session", func(p *api.Plan) { p.Sessions[0].Name = "other" }, "not in the config"},
		{"module missing", func(p *api.Plan) { p.Sessions[0].Modules = p.Sessions[0].Modules[:1] }, "plan has 1 modules, config 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := clonePlan(t, good)
			tc.break_(p)
			err := Verify(cfg, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func clonePlan(t *testing.T, p *api.Plan) *api.Plan {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out api.Plan
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}
