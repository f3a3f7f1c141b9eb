package planner

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// TestRacePlansKTimesTheMachines: a module raced on k machines (Cloudflow's
// competitive execution) is planned with k times the whole machines (a
// fraction rounded up) and their cost of the same module unraced, at the same
// WCL, and the plan still checks.
func TestRacePlansKTimesTheMachines(t *testing.T) {
	session := func(race api.Race) *api.Config {
		return withSessions(tableI(), api.Session{Name: "chain", SLO: api.Duration(900 * time.Millisecond), Modules: []api.Module{
			{Name: "m2", Model: "m2", Rate: 50}, {Name: "m3", Model: "m3", Rate: 40, After: []string{"m2"}, Race: race},
		}})
	}
	plain, err := Plan(session(0), Options{Policy: "paper"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := session(2)
	raced, err := Plan(cfg, Options{Policy: "paper"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(cfg, raced); err != nil {
		t.Fatalf("the raced plan fails the check: %v", err)
	}
	p, r := plain.Sessions[0].Modules[1], raced.Sessions[0].Modules[1]
	if r.Race != 2 || p.Race != 0 {
		t.Errorf("plan's race %d (unraced %d), want 2 (0)", r.Race, p.Race)
	}
	if r.WCLMs != p.WCLMs {
		t.Errorf("raced m3 WCL %.4gms, want the unraced %.4gms", r.WCLMs, p.WCLMs)
	}
	want := 0.0
	for k := range r.Configs {
		m := 2 * math.Ceil(p.Configs[k].Machines-1e-9)
		if r.Configs[k].Machines != m {
			t.Errorf("group %d: %.4g machines, want twice the whole machines of %.4g: %g", k, r.Configs[k].Machines, p.Configs[k].Machines, m)
		}
		want += m * p.Configs[k].Price
	}
	if math.Abs(r.Cost-want) > 1e-9 {
		t.Errorf("raced m3 costs %.4g, want %.4g", r.Cost, want)
	}
	if d := raced.TotalCost - plain.TotalCost; math.Abs(d-(want-p.Cost)) > 1e-9 {
		t.Errorf("total cost grew by %.4g, want %.4g", d, want-p.Cost)
	}
}

// TestAnyOfPlansTheFasterBranch: a session whose slow branch alone cannot meet
// the SLO (a chain of m2 modules whose profiled durations alone add up past
// it) is planned when its join is anyof (the latency is the faster branch's),
// and is infeasible when it waits for both.
func TestAnyOfPlansTheFasterBranch(t *testing.T) {
	const slo = 3 * time.Second
	cfg0 := tableI()
	var fastest time.Duration
	for _, p := range cfg0.ProfilesOf("m2") {
		for _, e := range p.Entries {
			if fastest == 0 || e.Duration.D() < fastest {
				fastest = e.Duration.D()
			}
		}
	}
	n := int(slo/fastest) + 1
	session := func(join string) *api.Config {
		mods := []api.Module{{Name: "fast", Model: "m3", Rate: 10}}
		prev := ""
		for i := range n {
			m := api.Module{Name: fmt.Sprintf("slow%d", i), Model: "m2", Rate: 10}
			if prev != "" {
				m.After = []string{prev}
			}
			prev = m.Name
			mods = append(mods, m)
		}
		mods = append(mods, api.Module{Name: "pick", Model: "m3", Rate: 10, After: []string{prev, "fast"}, Join: join})
		return withSessions(tableI(), api.Session{Name: "race", SLO: api.Duration(slo), Modules: mods})
	}
	for _, tc := range []struct {
		join     string
		feasible bool
	}{{api.JoinAnyOf, true}, {"", false}} {
		cfg := session(tc.join)
		p, err := Plan(cfg, Options{Policy: "paper"})
		if err != nil {
			if !tc.feasible && errors.Is(err, ErrInfeasible) {
				continue
			}
			t.Fatalf("join %q: %v", tc.join, err)
		}
		sp := p.Sessions[len(p.Sessions)-1]
		if got := sp.Error == ""; got != tc.feasible {
			t.Errorf("join %q, slow branch of %d m2 modules (%v each at best): planned %v (%s), want %v", tc.join, n, fastest, got, sp.Error, tc.feasible)
			continue
		}
		if tc.feasible {
			if err := Verify(cfg, p); err != nil {
				t.Errorf("join %q: the plan fails the check: %v", tc.join, err)
			}
			if sp.LatencyMs > float64(slo.Milliseconds())+1e-6 {
				t.Errorf("join %q: latency %.4gms above the SLO %v", tc.join, sp.LatencyMs, slo)
			}
		}
	}
}
