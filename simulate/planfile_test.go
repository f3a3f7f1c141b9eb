package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

const handJSON = `{"policy":"hand","sessions":[{"name":"s","slo_ms":500,
 "modules":[{"name":"a","rate":20,"budget_ms":300,"configs":[{"batch":2,"concurrency":1,"duration_ms":50,"machines":1,"rate":20}]},
            {"name":"b","after":["a"],"rate":20,"budget_ms":200,"configs":[{"batch":1,"duration_ms":20,"machines":0.5,"rate":20}]}]}]}`

func TestReadPlan(t *testing.T) {
	p, err := api.ReadPlan(strings.NewReader(handJSON), "hand.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(p, Options{Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Sessions[0]; s.Completed != 100 || s.Modules[1].Items != 100 {
		t.Errorf("completed %d, module b %d items; want 100 each", s.Completed, s.Modules[1].Items)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"sessions":[]}`, "hand.json: plan has no sessions"},
		{"{\"sessions\":\n[{\"name\":\"s\",\"modules\":[{\"name\":\"m\",\"configs\":[{\"batch\":\"four\"}]}]}]}", `hand.json:2: plan JSON: field "sessions.modules.configs.batch"`},
		{`{"sessions":[{"name":"s","modules":[{"name":"m"}]}]}`, `module "m" has no configs`},
		{`{"sessions":[{"name":"s"}]} {}`, "more than one JSON value"},
		{`{"sessions":[{"name":"s",`, "plan JSON"},
	} {
		if _, err := api.ReadPlan(strings.NewReader(tc.in), "hand.json"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("api.ReadPlan(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// A cycle and an unknown parent are named.
	cyc := strings.Replace(handJSON, `{"name":"a",`, `{"name":"a","after":["b"],`, 1)
	p, _ = api.ReadPlan(strings.NewReader(cyc), "c.json")
	if _, err := Run(p, Options{Duration: time.Second}); err == nil || !strings.Contains(err.Error(), "a -> b -> a") && !strings.Contains(err.Error(), "b -> a -> b") {
		t.Errorf("cycle: %v", err)
	}
}

// FuzzReadPlan: no input makes ReadPlan or a short simulation of what it accepts panic.
func FuzzReadPlan(f *testing.F) {
	f.Add(handJSON)
	f.Add(`{"sessions":[{"name":"s","modules":[{"name":"m","configs":[{"batch":1,"duration_ms":1e-9,"machines":1e4}]}]}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		p, err := api.ReadPlan(strings.NewReader(in), "fuzz.json")
		if err != nil {
			return
		}
		// Simulate only small plans: the decoder is what is fuzzed; a big plan is
		// merely slow (1e4 machines × 1e7 req/s), not wrong.
		var machines, rate float64
		for _, s := range p.Sessions {
			for _, m := range s.Modules {
				rate += m.Rate + m.DummyRate
				for _, g := range m.Configs {
					machines += g.Machines
					rate += g.Rate
				}
			}
		}
		if !(machines <= 64 && rate <= 1e5) {
			return
		}
		_, _ = Run(p, Options{Duration: 100 * time.Millisecond, Drain: time.Second})
	})
}
