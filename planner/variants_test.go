package planner

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// variantsConfig: a chain det → rec where each module has a large, accurate
// variant and a small, cheap one.
const variantsConfig = `
hardware:
  - {name: cpu, price: 1}
profiles:
  - {model: det-l, hardware: cpu, entries: [{batch: 1, duration: 100ms}, {batch: 4, duration: 300ms}]}
  - {model: det-s, hardware: cpu, entries: [{batch: 1, duration: 30ms}, {batch: 4, duration: 90ms}]}
  - {model: rec-l, hardware: cpu, entries: [{batch: 1, duration: 40ms}, {batch: 4, duration: 120ms}]}
  - {model: rec-s, hardware: cpu, entries: [{batch: 1, duration: 20ms}, {batch: 4, duration: 60ms}]}
sessions:
  - name: ocr
    slo: 2s
    ACCURACY
    modules:
      - name: det
        rate: 10
        variants: [{model: det-l, accuracy: 0.98}, {model: det-s, accuracy: 0.90}]
      - name: rec
        rate: 10
        after: [det]
        variants: [{model: rec-l, accuracy: 0.97}, {model: rec-s, accuracy: 0.93}]
`

func loadVariants(t *testing.T, accuracy string) *api.Config {
	t.Helper()
	doc := strings.Replace(variantsConfig, "ACCURACY", accuracy, 1)
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "variants.yaml", Data: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestVariantsMeetTargetAtLeastCost: each target gets the cheapest
// combination whose accuracy product reaches it, from the beam and from the
// exhaustive optimum alike, and the plan names the chosen variants.
func TestVariantsMeetTargetAtLeastCost(t *testing.T) {
	for _, tc := range []struct {
		accuracy string
		det, rec string
	}{
		{"", "det-l", "rec-l"},               // no target: the most accurate (0.9506)
		{"accuracy: 0.95", "det-l", "rec-l"}, // only both large reach it
		{"accuracy: 0.90", "det-l", "rec-s"}, // 0.9114; det-s rec-l is 0.873
		{"accuracy: 0.85", "det-s", "rec-l"}, // 0.873: the small det saves more than the small rec
		{"accuracy: 0.80", "det-s", "rec-s"}, // 0.837
	} {
		cfg := loadVariants(t, tc.accuracy)
		for _, policy := range []string{"piccolo", "optimal"} {
			p, err := Plan(cfg, Options{Policy: policy})
			if err != nil {
				t.Fatalf("%q %s: %v", tc.accuracy, policy, err)
			}
			if err := Verify(cfg, p); err != nil {
				t.Errorf("%q %s: plan fails its check: %v", tc.accuracy, policy, err)
			}
			sp := p.Sessions[0]
			got := map[string]api.ModulePlan{}
			for _, m := range sp.Modules {
				got[m.Name] = m
				if m.Model != m.Variant {
					t.Errorf("%q %s: module %s serves model %s but chose variant %s", tc.accuracy, policy, m.Name, m.Model, m.Variant)
				}
			}
			want := map[string]string{"det": tc.det, "rec": tc.rec}
			for name, model := range want {
				if got[name].Variant != model {
					t.Errorf("%q %s: module %s chose %s; want %s", tc.accuracy, policy, name, got[name].Variant, model)
				}
			}
			if sp.Accuracy < sp.AccuracyTarget-1e-9 || sp.Accuracy <= 0 {
				t.Errorf("%q %s: accuracy %.4f below target %.4f", tc.accuracy, policy, sp.Accuracy, sp.AccuracyTarget)
			}
		}
	}
}

// TestVariantsSaveCost: a lower target never costs more, and the cheapest
// combination costs less than always the most accurate variants.
func TestVariantsSaveCost(t *testing.T) {
	best, err := Plan(MostAccurate(loadVariants(t, "accuracy: 0.8")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	prev := best.TotalCost
	for _, a := range []string{"accuracy: 0.95", "accuracy: 0.90", "accuracy: 0.85", "accuracy: 0.80"} {
		p, err := Plan(loadVariants(t, a), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if p.TotalCost > prev+1e-9 {
			t.Errorf("%s costs %.4f, more than the higher target's %.4f", a, p.TotalCost, prev)
		}
		prev = p.TotalCost
	}
	if !(prev < 0.7*best.TotalCost) {
		t.Errorf("target 0.80 costs %.4f; want well below the most accurate variants' %.4f", prev, best.TotalCost)
	}
}

// TestVariantsTargetTooHigh: a target above the best combination is an error
// naming it, wrapping ErrInfeasible.
func TestVariantsTargetTooHigh(t *testing.T) {
	_, err := Plan(loadVariants(t, "accuracy: 0.99"), Options{})
	if !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "accuracy target 0.99 is above the most accurate combination's 0.9506 (det det-l 0.98, rec rec-l 0.97)") {
		t.Errorf("err %v; want ErrInfeasible naming the best combination", err)
	}
}

// TestVariantBench: on seeded workloads with variants every plan passes its
// check, the beam is never cheaper than the exhaustive optimum by more than
// the optimum's grid allows, and choosing variants saves against always the
// most accurate ones.
func TestVariantBench(t *testing.T) {
	n := 16
	if testing.Short() {
		n = 6
	}
	ws := GenerateVariantWorkloads(3, n, DefaultWorkloadSpec)
	rows, err := RunVariantBench(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + VariantBenchLines(rows, n))
	vsOpt, vsBest := rows[1], rows[5]
	if vsOpt.N == 0 || vsOpt.Avg < -0.005 {
		t.Errorf("climb vs optimal: avg %.2f%% over %d workloads; want ≥ -0.5%% (the optimum is a lower bound up to its grid)", 100*vsOpt.Avg, vsOpt.N)
	}
	if vsBest.N == 0 || !(vsBest.Avg < -0.05) {
		t.Errorf("climb vs most accurate: avg %.2f%% over %d workloads; want a saving of more than 5%%", 100*vsBest.Avg, vsBest.N)
	}
}

// TestVariantClimbBeyondAll: with more combinations than MaxCombinations the
// default search runs the beam and climbs; it is never worse than the beam
// alone, never better than every combination, and its plans pass Check.
func TestVariantClimbBeyondAll(t *testing.T) {
	spec := DefaultWorkloadSpec
	spec.MinModules, spec.MaxModules = 5, 5
	tried := 0
	for _, cfg := range GenerateVariantWorkloads(21, 30, spec) {
		s := &cfg.Sessions[0]
		choices := make([][]api.Variant, len(s.Modules))
		for i := range s.Modules {
			choices[i] = s.Modules[i].Variants
		}
		// A target that many combinations reach, but not the cheapest.
		best := 1.0
		for _, vs := range choices {
			best *= vs[0].Accuracy // the generator's first variant is the most accurate
		}
		target := best * 0.8
		s.Accuracy = &target
		list, _ := allCombos(newAccuracyRule(s, choices), target, math.MaxInt)
		combos := len(list)
		if combos <= MaxCombinations {
			continue
		}
		tried++
		cost := map[string]float64{}
		for _, search := range []string{"beam", "climb", "all"} {
			p, err := Plan(cfg, Options{Policy: "piccolo", MaxUtilization: 1, VariantSearch: search})
			if err != nil {
				t.Fatalf("%s %s: %v", s.Name, search, err)
			}
			if err := Verify(cfg, p); err != nil {
				t.Errorf("%s %s: plan fails its check: %v", s.Name, search, err)
			}
			cost[search] = p.TotalCost
		}
		t.Logf("%s: %d combinations: beam %.4g, climb %.4g, all %.4g", s.Name, combos, cost["beam"], cost["climb"], cost["all"])
		if cost["climb"] > cost["beam"]+1e-9 || cost["all"] > cost["climb"]+1e-9 {
			t.Errorf("%s: beam %.6g, climb %.6g, all %.6g: want beam ≥ climb ≥ all", s.Name, cost["beam"], cost["climb"], cost["all"])
		}
	}
	if tried == 0 {
		t.Fatal("no workload with more than MaxCombinations combinations")
	}
}

// TestJointAccuracyReplacesProduct: a combination's measured joint accuracy
// replaces the product of its variants' accuracies, both ways. At target
// 0.80 the product of det-s and rec-s (0.837) reaches it; measured jointly at
// 0.78 it does not, and every search picks det-s with rec-l (0.873) instead.
// At target 0.95 only both large variants reach it by the product (0.9506);
// det-l with rec-s measured jointly at 0.955 is cheaper and is picked. The
// plan says its accuracy is the measured one.
func TestJointAccuracyReplacesProduct(t *testing.T) {
	for _, tc := range []struct {
		accuracy, joint string
		det, rec        string
		acc             float64
		measured        bool
	}{
		{"accuracy: 0.80", "", "det-s", "rec-s", 0.837, false},
		{"accuracy: 0.80", "{variants: {det: det-s, rec: rec-s}, accuracy: 0.78}", "det-s", "rec-l", 0.873, false},
		{"accuracy: 0.95", "", "det-l", "rec-l", 0.9506, false},
		{"accuracy: 0.95", "{variants: {rec: rec-s, det: det-l}, accuracy: 0.955}", "det-l", "rec-s", 0.955, true},
	} {
		accuracy := tc.accuracy
		if tc.joint != "" {
			accuracy += "\n    joint_accuracy: [" + tc.joint + "]"
		}
		cfg := loadVariants(t, accuracy)
		for _, o := range []Options{{VariantSearch: "climb"}, {VariantSearch: "beam"}, {VariantSearch: "all"}, {Policy: "optimal"}} {
			p, err := Plan(cfg, o)
			if err != nil {
				t.Fatalf("%s %s %+v: %v", tc.accuracy, tc.joint, o, err)
			}
			sp := p.Sessions[0]
			got := map[string]string{}
			for _, m := range sp.Modules {
				got[m.Name] = m.Variant
			}
			if got["det"] != tc.det || got["rec"] != tc.rec || math.Abs(sp.Accuracy-tc.acc) > 1e-3 || sp.AccuracyJoint != tc.measured {
				t.Errorf("%s, joint %q, %+v: chose det %s, rec %s at accuracy %.4g (joint %v); want %s, %s at %.4g (joint %v)",
					tc.accuracy, tc.joint, o, got["det"], got["rec"], sp.Accuracy, sp.AccuracyJoint, tc.det, tc.rec, tc.acc, tc.measured)
			}
		}
	}
	// The most accurate combination is by the same rule: a target above a
	// joint measurement of both large variants is infeasible, named with
	// it; measured at 0.90, det-l with rec-s (0.9114 by the product) is the
	// most accurate, and a session without a target gets it.
	cfg := loadVariants(t, "accuracy: 0.95\n    joint_accuracy: [{variants: {det: det-l, rec: rec-l}, accuracy: 0.93}]")
	if _, err := Plan(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "above the most accurate combination's 0.93") {
		t.Errorf("target 0.95 over a best combination measured at 0.93: %v; want infeasible, naming 0.93", err)
	}
	cfg = loadVariants(t, "joint_accuracy: [{variants: {det: det-l, rec: rec-l}, accuracy: 0.90}]")
	p, err := Plan(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sp := p.Sessions[0]; math.Abs(sp.AccuracyTarget-0.9114) > 1e-3 || math.Abs(sp.Accuracy-0.9114) > 1e-3 {
		t.Errorf("no target, both large measured at 0.90: target %.4g, accuracy %.4g; want det-l with rec-s's 0.9114 for both", sp.AccuracyTarget, sp.Accuracy)
	}
}
