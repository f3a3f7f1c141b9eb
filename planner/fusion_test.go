package planner_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// fusionConfig is a session src → a → b → sink at 10 req/s (b's rate is
// bRate), each module 10 ms on hardware h (price 1), and a fused profile of
// a+b taking fusedMs.
func fusionConfig(t *testing.T, fusedMs float64, bRate float64) *api.Config {
	t.Helper()
	doc := fmt.Sprintf(`
hardware: [{name: h, price: 1}]
profiles:
  - {model: m-src, hardware: h, entries: [{batch: 1, concurrency: 1, duration: 10ms}]}
  - {model: m-a, hardware: h, entries: [{batch: 1, concurrency: 1, duration: 10ms}]}
  - {model: m-b, hardware: h, entries: [{batch: 1, concurrency: 1, duration: 10ms}]}
  - {model: m-sink, hardware: h, entries: [{batch: 1, concurrency: 1, duration: 10ms}]}
  - {model: m-a+m-b, hardware: h, entries: [{batch: 1, concurrency: 1, duration: %gms}]}
sessions:
  - name: s
    slo: 2s
    modules:
      - {name: src, model: m-src, rate: 10}
      - {name: a, model: m-a, rate: 10, after: [src]}
      - {name: b, model: m-b, rate: %g, after: [a]}
      - {name: sink, model: m-sink, rate: %g, after: [b]}
`, fusedMs, bRate, bRate)
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "fusion.yaml", Data: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func planWith(c *api.Config) (*api.Plan, error) { return planner.Plan(c, planner.Options{}) }

func TestFuseWhenCheaper(t *testing.T) {
	cfg := fusionConfig(t, 15, 10) // 15 ms for both steps instead of 2 × 10 ms
	out, fusions, err := planner.Fuse(cfg, planWith)
	if err != nil {
		t.Fatal(err)
	}
	if len(fusions) != 1 || fusions[0].Module != "a+b" || fusions[0].Model != "m-a+m-b" || strings.Join(fusions[0].Modules, ",") != "a,b" {
		t.Fatalf("fusions = %+v, want a and b fused into a+b (model m-a+m-b)", fusions)
	}
	if f := fusions[0]; !(f.Cost < f.UnfusedCost) {
		t.Errorf("fusion cost %g, unfused %g: want cheaper", f.Cost, f.UnfusedCost)
	}
	s := out.Sessions[0]
	var names []string
	for _, m := range s.Modules {
		names = append(names, m.Name+"<"+strings.Join(m.After, ","))
	}
	if got := strings.Join(names, " "); got != "src< a+b<src sink<a+b" {
		t.Errorf("fused session modules %q, want %q", got, "src< a+b<src sink<a+b")
	}
	// The fused config plans as reported, and cfg itself is untouched.
	p, err := planWith(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.TotalCost != fusions[0].Cost {
		t.Errorf("fused config plans at cost %g, Fuse said %g", p.TotalCost, fusions[0].Cost)
	}
	if len(cfg.Sessions[0].Modules) != 4 || cfg.Sessions[0].Modules[3].After[0] != "b" {
		t.Errorf("Fuse changed its input config: %+v", cfg.Sessions[0].Modules)
	}
}

func TestNoFuseWhenDearer(t *testing.T) {
	cfg := fusionConfig(t, 25, 10) // 25 ms fused against 2 × 10 ms apart
	out, fusions, err := planner.Fuse(cfg, planWith)
	if err != nil {
		t.Fatal(err)
	}
	if len(fusions) != 0 || len(out.Sessions[0].Modules) != 4 {
		t.Errorf("fusions = %+v (%d modules), want none: the fused profile is dearer", fusions, len(out.Sessions[0].Modules))
	}
}

// TestNoFuseAcrossFanOut: b runs at a higher rate than a (one item per
// element a answers), so a and b are not one chain, however cheap the profile.
func TestNoFuseAcrossFanOut(t *testing.T) {
	cfg := fusionConfig(t, 1, 20)
	_, fusions, err := planner.Fuse(cfg, planWith)
	if err != nil {
		t.Fatal(err)
	}
	if len(fusions) != 0 {
		t.Errorf("fusions = %+v, want none across a fan-out", fusions)
	}
}

// TestFuseVariantChain: a chain holding a module with variants fuses into a
// module whose variants are the combinations with a fused profile, each with
// the product of its variants' accuracies; when a cheaper unfused
// combination (one without a fused profile) meets the target, the chain stays
// unfused.
func TestFuseVariantChain(t *testing.T) {
	doc := func(target string) *api.Config {
		t.Helper()
		cfg, err := api.LoadBytes(api.NamedDoc{Name: "fusion.yaml", Data: []byte(`
hardware: [{name: cpu, price: 1}]
profiles:
  - {model: a, hardware: cpu, entries: [{batch: 1, concurrency: 1, duration: 50ms}]}
  - {model: b, hardware: cpu, accuracy: 0.99, entries: [{batch: 1, concurrency: 1, duration: 50ms}]}
  - {model: b-small, hardware: cpu, accuracy: 0.9, entries: [{batch: 1, concurrency: 1, duration: 20ms}]}
  - {model: a+b, hardware: cpu, entries: [{batch: 1, concurrency: 1, duration: 90ms}]}
sessions:
  - name: s
    slo: 2s
    ` + target + `
    modules:
      - {name: x, model: a, rate: 4}
      - {name: y, rate: 4, after: [x], variants: [{model: b}, {model: b-small}]}
`)})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	// Without a target: b (0.99) is chosen, a + b at 100 ms a request
	// unfused; fused a+b at 90 ms is cheaper and as accurate.
	out, fusions, err := planner.Fuse(doc(""), planWith)
	if err != nil {
		t.Fatal(err)
	}
	if len(fusions) != 1 || fusions[0].Model != "a+b" {
		t.Fatalf("fusions %v; want x, y fused into a+b", fusions)
	}
	fm := out.Sessions[0].Modules[0]
	if fm.Name != "x+y" || fm.Model != "" || len(fm.Variants) != 1 || fm.Variants[0].Model != "a+b" || fm.Variants[0].Accuracy != 0.99 {
		t.Fatalf("fused module %+v; want x+y with the one variant a+b at accuracy 0.99", fm)
	}
	p, err := planWith(out)
	if err != nil {
		t.Fatal(err)
	}
	if sp := p.Sessions[0]; sp.Modules[0].Model != "a+b" || sp.Accuracy != 0.99 {
		t.Errorf("fused plan serves %s at accuracy %v; want a+b at 0.99", sp.Modules[0].Model, sp.Accuracy)
	}
	// At target 0.9, a + b-small (70 ms, 0.9) meets it unfused and is
	// cheaper than a+b: no fusion.
	out, fusions, err = planner.Fuse(doc("accuracy: 0.9"), planWith)
	if err != nil {
		t.Fatal(err)
	}
	if len(fusions) != 0 {
		t.Errorf("fusions %v at target 0.9; want none (a + b-small is cheaper)", fusions)
	}
	if p, err = planWith(out); err != nil {
		t.Fatal(err)
	}
	if v := p.Sessions[0].Modules[1].Variant; v != "b-small" {
		t.Errorf("module y serves %s at target 0.9; want b-small", v)
	}
}
