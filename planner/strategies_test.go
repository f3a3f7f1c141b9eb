package planner

import (
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// pessimistic is a latency model from outside the built-in registry: TC's
// exact WCL plus one more batch duration.
type pessimistic struct{}

var _ LatencyModel = pessimistic{}

func (pessimistic) Name() string        { return "pessimistic" }
func (pessimistic) RateDependent() bool { return true }
func (pessimistic) WCL(c Candidate, w float64) float64 {
	return TCExact.WCL(c, w) + c.Duration
}
func (pessimistic) Need(c Candidate, L float64) float64 { return TCExact.Need(c, L-c.Duration) }

// countingSplit is a latency split from outside the built-in registry: the
// cost greedy's score, counting the moves it ranks.
type countingSplit struct{ scored *atomic.Int64 }

func (countingSplit) Name() string { return "counting" }
func (s countingSplit) Score(_ Candidate, save, _ float64) float64 {
	s.scored.Add(1)
	return save
}

// mostAccurateSearch is a variant search from outside the built-in registry: it
// plans only the most accurate combination.
type mostAccurateSearch struct{}

func (mostAccurateSearch) Name() string { return "most-accurate" }
func (mostAccurateSearch) Climb() bool  { return false }
func (mostAccurateSearch) Combinations(v *VariantSpace) []Combination {
	all, _ := v.All(math.MaxInt)
	return all[:1]
}

// TestOutsideStrategies registers a latency model, a split and a variant
// search beside the built-in ones and plans with each by name, as main does
// with --model, --split and --variant-search; an unknown name lists the
// registered ones.
func TestOutsideStrategies(t *testing.T) {
	var scored atomic.Int64
	models, err := BuiltinModels().With(pessimistic{})
	if err != nil {
		t.Fatal(err)
	}
	splits, err := BuiltinSplits().With(countingSplit{&scored})
	if err != nil {
		t.Fatal(err)
	}
	searches, err := BuiltinVariantSearches().With(mostAccurateSearch{})
	if err != nil {
		t.Fatal(err)
	}
	st := Strategies{Models: models, Splits: splits, VariantSearches: searches}
	cfg := withSessions(tableI(), m1Session(285, 2*time.Second))

	exact, err := Plan(cfg, Options{Policy: "piccolo", Model: "tc-exact", Split: "cost"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Plan(cfg, Options{Policy: "piccolo", Model: "pessimistic", Split: "counting", Strategies: st})
	if err != nil {
		t.Fatal(err)
	}
	if p.LatencyModel != "pessimistic" {
		t.Errorf("plan's latency model %q, want pessimistic", p.LatencyModel)
	}
	if scored.Load() == 0 {
		t.Error("the counting split ranked no move")
	}
	if p.TotalCost < exact.TotalCost-1e-9 {
		t.Errorf("cost %.6g under the pessimistic model, below tc-exact's %.6g", p.TotalCost, exact.TotalCost)
	}
	for _, m := range p.Sessions[0].Modules {
		for _, g := range m.Configs {
			if want := 2 * g.DurationMs; g.WCLMs < want-1e-9 {
				t.Errorf("module %s group %s: WCL %.4g ms, want at least two durations (%.4g ms) under the pessimistic model", m.Name, g.Hardware, g.WCLMs, want)
			}
		}
	}

	// Variants: the outside search plans the most accurate combination only;
	// "all" finds a cheaper one that still reaches the target.
	vcfg := GenerateVariantWorkloads(21, 1, DefaultWorkloadSpec)[0]
	target := 0.0
	vcfg.Sessions[0].Accuracy = &target
	all, err := Plan(vcfg, Options{Policy: "piccolo", VariantSearch: "all"})
	if err != nil {
		t.Fatal(err)
	}
	acc, err := Plan(vcfg, Options{Policy: "piccolo", VariantSearch: "most-accurate", Strategies: st})
	if err != nil {
		t.Fatal(err)
	}
	best := 1.0
	for _, m := range vcfg.Sessions[0].Modules {
		best *= m.Variants[0].Accuracy // the generator's first variant is the most accurate
	}
	if got := acc.Sessions[0].Accuracy; math.Abs(got-best) > 1e-9 {
		t.Errorf("most-accurate search: accuracy %.6g, want the most accurate combination's %.6g", got, best)
	}
	if all.TotalCost > acc.TotalCost+1e-9 {
		t.Errorf("all: cost %.6g, above the most accurate combination's %.6g", all.TotalCost, acc.TotalCost)
	}

	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Model: "pessimistic"}, `unknown latency model "pessimistic"; allowed: tc-exact, tc-theorem1, rr-2d, local`},
		{Options{Split: "counting"}, `unknown split "counting"; allowed: lc, throughput, cost, even, quantized`},
		{Options{VariantSearch: "most-accurate"}, `unknown variant search "most-accurate"; allowed: climb, beam, all`},
		{Options{Split: "nope", Strategies: st}, `allowed: lc, throughput, cost, even, quantized, counting`},
	} {
		if _, err := Plan(cfg, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Plan(%+v) = %v; want an error containing %q", c.o, err, c.want)
		}
	}
}
