package planner

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// tailConfig is simulate/testdata/race.yaml's model (batches of 1, 4, 16
// and 32 taking 5, 8, 16 and 24 ms) in one session of slo: module t at rate
// with race and tail, then, with child, module u (the same model) after it.
func tailConfig(slo time.Duration, rate float64, race api.Race, tail *api.Tail, child bool) *api.Config {
	e := func(b int, d time.Duration) api.ProfileEntry {
		return api.ProfileEntry{Batch: b, Concurrency: 1, Duration: api.Duration(d)}
	}
	mods := []api.Module{{Name: "t", Model: "mt", Rate: rate, Race: race, Tail: tail}}
	if child {
		mods = append(mods, api.Module{Name: "u", Model: "mt", Rate: rate, After: []string{"t"}})
	}
	return &api.Config{
		Hardware: []api.Hardware{{Name: "cpu", Price: 1}},
		Profiles: []api.Profile{{Model: "mt", Hardware: "cpu", Entries: []api.ProfileEntry{
			e(1, 5*time.Millisecond), e(4, 8*time.Millisecond), e(16, 16*time.Millisecond), e(32, 24*time.Millisecond)}}},
		Sessions: []api.Session{{Name: "tail", SLO: api.Duration(slo), Modules: mods}},
	}
}

func TestTailForms(t *testing.T) {
	for _, c := range []struct {
		name          string
		tail          *api.Tail
		k             int
		plain, heldUp bool
		mean          float64
		race          int // raceFor
	}{
		{"none", nil, 1, true, false, 1, 0},
		{"share 0", &api.Tail{Share: 0, Factor: 8}, 1, true, false, 1, 0},
		{"factor 1", &api.Tail{Share: 0.3, Factor: 1}, 1, true, false, 1, 0},
		// 0.1·9 = 0.9 of the items: headroom only; race 4: 0.0001·9 ≤ 0.001.
		{"heavy", &api.Tail{Share: 0.1, Factor: 8}, 1, false, false, 1.7, 4},
		{"heavy raced 3", &api.Tail{Share: 0.1, Factor: 8}, 3, false, true, 1.007, 4},
		{"heavy raced 4", &api.Tail{Share: 0.1, Factor: 8}, 4, true, true, 1.0007, 4},
		// 0.0005·9 = 0.45%: above TailMiss, held up offered; race 2 enough.
		{"light", &api.Tail{Share: 0.0005, Factor: 8}, 1, false, true, 1.0035, 2},
		// 0.0001·9 = 0.09%: within TailMiss, no race needed.
		{"lighter", &api.Tail{Share: 0.0001, Factor: 8}, 1, true, true, 1.0007, 0},
		// 0.5^8·101 = 39%: no race up to MaxRace helps.
		{"too heavy", &api.Tail{Share: 0.5, Factor: 100}, 1, false, false, 50.5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain, heldUp, mean := tailForms(c.tail, c.k)
			if plain != c.plain || heldUp != c.heldUp || math.Abs(mean-c.mean) > 1e-9 {
				t.Errorf("tailForms(k=%d) = %v, %v, %v; want %v, %v, %v", c.k, plain, heldUp, mean, c.plain, c.heldUp, c.mean)
			}
			if p, h, m := tailCheck(c.tail, c.k); p != plain || h != heldUp || m != mean {
				t.Errorf("tailCheck (Verify's) = %v, %v, %v; tailForms %v, %v, %v", p, h, m, plain, heldUp, mean)
			}
			if got := raceFor(c.tail); got != c.race {
				t.Errorf("raceFor = %d, want %d", got, c.race)
			}
		})
	}
}

// A module with a heavy tail is planned for it under every policy: its WCL
// at its tail's duration (TailMs), its machines sized for it, and the plan
// passes Verify, which refuses the same plan with the tail's duration or
// the race taken out. u, after t, sees t's slow batches in its burst.
func TestTailPlansCheck(t *testing.T) {
	heavy := &api.Tail{Share: 0.1, Factor: 8}
	for _, policy := range []string{"piccolo", "paper", "nexus", "scrooge", "inferline", "optimal"} {
		for _, race := range []api.Race{0, 2, 4, api.RaceAuto} {
			cfg := tailConfig(time.Second, 200, race, heavy, true)
			p, err := Plan(cfg, Options{Policy: policy})
			if err != nil {
				t.Errorf("%s race %d: %v", policy, race, err)
				continue
			}
			if err := Verify(cfg, p); err != nil {
				t.Errorf("%s race %d: the plan fails its check: %v", policy, race, err)
				continue
			}
			mp := p.Sessions[0].Modules[0]
			if mp.Tail == nil || *mp.Tail != *heavy {
				t.Errorf("%s race %d: the plan's tail %v, want the config's %v", policy, race, mp.Tail, *heavy)
			}
			if race == 4 || race == api.RaceAuto && mp.Race == 4 {
				for _, g := range mp.Configs {
					if g.TailMs != 0 {
						t.Errorf("%s race %d: group b%d tail_ms %v, want none (0.01%% of batches slow)", policy, race, g.Batch, g.TailMs)
					}
				}
				continue
			}
			for k, g := range mp.Configs {
				if g.TailMs != 8*g.DurationMs && g.TailMs != 16*g.DurationMs {
					t.Errorf("%s race %d: group %d tail_ms %v, want 8× or 16× its %v ms", policy, race, k, g.TailMs, g.DurationMs)
				}
			}
			if b := Burst(mp); b < 7*mp.Configs[0].DurationMs/1000 {
				t.Errorf("%s race %d: t's burst %.4gs, want at least 7 × its %v ms (a slow batch beside a fast one)", policy, race, b, mp.Configs[0].DurationMs)
			}
			cut := *p
			cut.Sessions = []api.SessionPlan{p.Sessions[0]}
			cut.Sessions[0].Modules = append([]api.ModulePlan(nil), p.Sessions[0].Modules...)
			cut.Sessions[0].Modules[0].Configs = append([]api.GroupPlan(nil), mp.Configs...)
			cut.Sessions[0].Modules[0].Configs[0].TailMs = 0
			if err := Verify(cfg, &cut); err == nil || !strings.Contains(err.Error(), "want tail_ms") {
				t.Errorf("%s race %d: Verify took the plan without t's tail_ms: %v", policy, race, err)
			}
		}
	}
}

// race: auto is the cheaper of no race and raceFor's k for the module's
// tail (one module, simulate/race_test.go's): in a 100 ms SLO a heavy tail is not raced at 40 req/s (the 8×
// headroom of batches of 1 costs less than 4 whole machines) and is raced on
// 4 at 1000 (8× of batches of 4 against 4 machines of batches of 32); a light
// tail is not raced where the SLO holds a batch held up behind a slow one,
// and auto without a tail is no race. Verify takes every plan and refuses
// one whose auto module's race is 1.
func TestRaceAutoTakesTheCheaper(t *testing.T) {
	heavy, light := &api.Tail{Share: 0.1, Factor: 8}, &api.Tail{Share: 0.0005, Factor: 8}
	for _, c := range []struct {
		name string
		slo  time.Duration
		rate float64
		tail *api.Tail
		want int
	}{
		{"heavy, low rate", 100 * time.Millisecond, 40, heavy, 0},
		{"heavy, high rate", 100 * time.Millisecond, 1000, heavy, 4},
		{"light, loose SLO", 500 * time.Millisecond, 1000, light, 0},
		{"light, tight SLO", 100 * time.Millisecond, 1000, light, 2},
		{"no tail", 100 * time.Millisecond, 1000, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tailConfig(c.slo, c.rate, api.RaceAuto, c.tail, false)
			p, err := Plan(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(cfg, p); err != nil {
				t.Fatalf("the plan fails its check: %v", err)
			}
			if got := p.Sessions[0].Modules[0].Race; got != c.want {
				t.Errorf("race %d, want %d", got, c.want)
			}
			cost := func(race api.Race) float64 {
				p, err := Plan(tailConfig(c.slo, c.rate, race, c.tail, false), Options{})
				if err != nil {
					return math.Inf(1)
				}
				return p.TotalCost
			}
			if other := cost(api.Race(raceFor(c.tail))); c.want == 0 && raceFor(c.tail) > 1 && other < p.TotalCost-1e-9 {
				t.Errorf("auto costs %.4g unraced; raced on %d it costs %.4g", p.TotalCost, raceFor(c.tail), other)
			}
			if other := cost(0); c.want > 0 && other < p.TotalCost-1e-9 {
				t.Errorf("auto costs %.4g raced on %d; unraced it costs %.4g", p.TotalCost, c.want, other)
			}
			bad := *p
			bad.Sessions = append([]api.SessionPlan(nil), p.Sessions...)
			bad.Sessions[0].Modules = append([]api.ModulePlan(nil), p.Sessions[0].Modules...)
			bad.Sessions[0].Modules[0].Race = 1
			if err := Verify(cfg, &bad); err == nil || !strings.Contains(err.Error(), "for race: auto") {
				t.Errorf("Verify took race 1 for race: auto: %v", err)
			}
		})
	}
}

// A module that may race or has a measured tail is not fused, first in a
// chain or after it: a fused profile would race every model of the chain, or
// lose the tail. The same chain without either is fused.
func TestTailAndAutoAreNotFused(t *testing.T) {
	plan := func(c *api.Config) (*api.Plan, error) { return Plan(c, Options{}) }
	for _, c := range []struct {
		name  string
		at    int
		race  api.Race
		tail  *api.Tail
		fused bool
	}{
		{"plain", 0, 0, nil, true},
		{"auto first", 0, api.RaceAuto, nil, false},
		{"tail first", 0, 0, &api.Tail{Share: 0.1, Factor: 8}, false},
		{"auto after", 1, api.RaceAuto, nil, false},
		{"tail after", 1, 0, &api.Tail{Share: 0.1, Factor: 8}, false},
	} {
		cfg := tailConfig(time.Second, 100, 0, nil, true)
		cfg.Profiles = append(cfg.Profiles, api.Profile{Model: "mt" + FusionSep + "mt", Hardware: "cpu",
			Entries: []api.ProfileEntry{{Batch: 1, Concurrency: 1, Duration: api.Duration(time.Millisecond)}}})
		cfg.Sessions[0].Modules[c.at].Race, cfg.Sessions[0].Modules[c.at].Tail = c.race, c.tail
		fused, _, err := Fuse(cfg, plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(fused.Sessions[0].Modules) == 1; got != c.fused {
			t.Errorf("%s: fused %v, want %v", c.name, got, c.fused)
		}
	}
}
