package planner

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
)

// FusionSep joins the names of fused modules ("pre+det") and of their models
// ("ocr-pre+ocr-det"), as backends/fused names a fused chain.
const FusionSep = "+"

// Fusion is one chain of modules the planner fused into one stage (operator
// fusion, Cloudflow §4): Modules (in order) became the module Module running
// the model Model (for a chain with variants, its fused variants joined by
// " or "), because the session then planned cheaper (Cost <
// UnfusedCost, cost units), or at equal cost with a lower latency bound
// (LatencyMs < UnfusedLatencyMs).
type Fusion struct {
	Session          string
	Module           string
	Model            string
	Modules          []string
	Cost             float64
	UnfusedCost      float64
	LatencyMs        float64
	UnfusedLatencyMs float64
}

func (f Fusion) String() string {
	return fmt.Sprintf("session %s: fused %s into %s (model %s): cost %.4g (unfused %.4g), latency %.1fms (unfused %.1fms)",
		f.Session, strings.Join(f.Modules, ", "), f.Module, f.Model, f.Cost, f.UnfusedCost, f.LatencyMs, f.UnfusedLatencyMs)
}

// Fuse is the fusion decision, a config transformation run before planning.
// A fusable chain is a run of modules m1 → … → mk (k ≥ 2) of a session where
// each of m2…mk has m(i−1) as its only parent, each of m1…m(k−1) has m(i+1) as
// its only child, and all have the same rate (one fan-out level). A chain is a
// candidate when cfg profiles the model named by its models joined with
// FusionSep on some hardware (a fused profile, measured with `piccolo profile`
// against a backend that serves the chain as one model, backends/fused).
//
// A chain may hold modules with variants (docs/variants.md): each
// combination of its modules' choices whose joined models have a fused
// profile becomes a variant of the fused module, with the product of the
// combined variants' accuracies; combinations without a fused profile are
// not offered, so fusing can narrow the choice, and the plan comparison below
// decides whether that is worth it (a target only the unfused choices reach
// leaves the fused session infeasible, and unfused).
//
// For each session Fuse plans it with plan (planner.Plan or the gateway's
// planner) as it is and with each candidate fused, applies the best fused
// version if it is cheaper, or as cheap with a lower latency bound, and
// repeats until no candidate improves the session. The fused module is named
// by its modules' names joined with FusionSep, takes m1's After and rate, and
// the children of mk follow it; the session's inputs (m1's) and outputs (mk's)
// stay the same.
//
// Fuse returns a new config (cfg is not modified; unchanged sessions share
// their modules with cfg) and the fusions made, in order. It errors only when
// plan returns no plan at all (bad options); a session that is infeasible
// unfused may become feasible fused.
func Fuse(cfg *api.Config, plan func(*api.Config) (*api.Plan, error)) (*api.Config, []Fusion, error) {
	fusedModels := map[string]bool{}
	for _, p := range cfg.Profiles {
		if strings.Contains(p.Model, FusionSep) {
			fusedModels[p.Model] = true
		}
	}
	out := *cfg
	out.Sessions = append([]api.Session(nil), cfg.Sessions...)
	if len(fusedModels) == 0 {
		return &out, nil, nil
	}
	var fusions []Fusion
	for i := range out.Sessions {
		cur, err := planOne(&out, out.Sessions[i], plan)
		if err != nil {
			return nil, nil, err
		}
		for {
			var best *api.Session
			var bestPlan api.SessionPlan
			var bestChain []string
			for _, c := range fusableChains(&out, out.Sessions[i], fusedModels) {
				chain := c.modules
				s := fuseChain(out.Sessions[i], c)
				sp, err := planOne(&out, s, plan)
				if err != nil {
					return nil, nil, err
				}
				if better(sp, cur) && (best == nil || better(sp, bestPlan)) {
					best, bestPlan, bestChain = &s, sp, chain
				}
			}
			if best == nil {
				break
			}
			fm := best.Modules[moduleIndex(*best, strings.Join(bestChain, FusionSep))]
			model := fm.Model
			if model == "" { // fused variants: the plan names the one chosen
				var vs []string
				for _, v := range fm.Variants {
					vs = append(vs, v.Model)
				}
				model = strings.Join(vs, " or ")
			}
			fusions = append(fusions, Fusion{Session: best.Name, Module: fm.Name, Model: model, Modules: bestChain,
				Cost: bestPlan.Cost, UnfusedCost: cur.Cost, LatencyMs: bestPlan.LatencyMs, UnfusedLatencyMs: cur.LatencyMs})
			out.Sessions[i], cur = *best, bestPlan
		}
	}
	return &out, fusions, nil
}

// planOne plans session s alone under cfg's hardware and profiles.
func planOne(cfg *api.Config, s api.Session, plan func(*api.Config) (*api.Plan, error)) (api.SessionPlan, error) {
	one := *cfg
	one.Sessions = []api.Session{s}
	p, err := plan(&one)
	if p == nil {
		return api.SessionPlan{}, fmt.Errorf("fusion: planning session %s: %w", s.Name, err)
	}
	if len(p.Sessions) != 1 {
		return api.SessionPlan{}, fmt.Errorf("fusion: planning session %s: %d session plans, want 1", s.Name, len(p.Sessions))
	}
	sp := p.Sessions[0]
	if sp.Error == "" && err != nil && !errors.Is(err, ErrInfeasible) {
		sp.Error = err.Error()
	}
	return sp, nil
}

// better reports whether a is a better session plan than b: feasible where b is
// not, cheaper, or as cheap (within 1e-9 relative) with a lower latency bound.
func better(a, b api.SessionPlan) bool {
	if a.Error != "" {
		return false
	}
	if b.Error != "" {
		return true
	}
	tol := 1e-9 * math.Max(math.Abs(b.Cost), 1)
	if a.Cost < b.Cost-tol {
		return true
	}
	return a.Cost <= b.Cost+tol && a.LatencyMs < b.LatencyMs
}

// fusable is a fusable chain of modules and the fused module's models: one
// model (variants nil) when no module of the chain has variants, else the
// variants of the combinations that have a fused profile.
type fusable struct {
	modules  []string
	model    string
	variants []api.Variant
}

// maxFusedCombinations bounds the variant combinations a chain's fused module
// is offered (the planner's exact search goes to 256, see variants.go).
const maxFusedCombinations = 256

// fusableChains lists every chain of s (see Fuse) with a fused profile in
// fused for at least one combination of its modules' choices, sorted by
// module names for a deterministic choice.
func fusableChains(cfg *api.Config, s api.Session, fused map[string]bool) []fusable {
	byName := make(map[string]*api.Module, len(s.Modules))
	children := map[string][]string{}
	for i := range s.Modules {
		m := &s.Modules[i]
		byName[m.Name] = m
		for _, p := range m.After {
			children[p] = append(children[p], m.Name)
		}
	}
	// next returns the module a chain may extend m with: m's only child, whose
	// only parent is m, at m's rate. A module that may race (Race > 1 or
	// auto) is not fused: a fused profile would run its race on every model
	// of the chain; nor is one with a measured tail (the fused profile would
	// not carry it), nor a module with a fan-out distribution after the
	// chain's first (its items per parent item would be lost inside the
	// fused model).
	next := func(m *api.Module) *api.Module {
		if len(children[m.Name]) != 1 {
			return nil
		}
		c := byName[children[m.Name][0]]
		if c == nil || len(c.After) != 1 || c.Rate != m.Rate || c.MayRace() || c.Tail != nil || len(c.FanOut) > 0 {
			return nil
		}
		return c
	}
	// A combination so far: the models chosen and the product of their
	// accuracies.
	type combo struct {
		models   []string
		accuracy float64
	}
	extend := func(combos []combo, m *api.Module) []combo {
		var out []combo
		for _, c := range combos {
			for _, v := range m.Choices() {
				a := v.Accuracy
				if a == 0 {
					a = cfg.ModelAccuracy(v.Model)
				}
				if len(out) == maxFusedCombinations {
					return out
				}
				out = append(out, combo{append(c.models[:len(c.models):len(c.models)], v.Model), c.accuracy * a})
			}
		}
		return out
	}
	var chains []fusable
	for i := range s.Modules {
		m := &s.Modules[i]
		if m.MayRace() || m.Tail != nil {
			continue
		}
		names := []string{m.Name}
		hasVariants := len(m.Variants) > 0
		combos := extend([]combo{{accuracy: 1}}, m)
		for c := next(m); c != nil; c = next(c) {
			names = append(names, c.Name)
			hasVariants = hasVariants || len(c.Variants) > 0
			combos = extend(combos, c)
			f := fusable{modules: append([]string(nil), names...)}
			for _, k := range combos {
				model := strings.Join(k.models, FusionSep)
				if !fused[model] {
					continue
				}
				if hasVariants {
					f.variants = append(f.variants, api.Variant{Model: model, Accuracy: k.accuracy, Source: m.Source})
				} else {
					f.model = model
				}
			}
			if f.model != "" || len(f.variants) > 0 {
				chains = append(chains, f)
			}
		}
	}
	sort.Slice(chains, func(i, j int) bool {
		return strings.Join(chains[i].modules, FusionSep) < strings.Join(chains[j].modules, FusionSep)
	})
	return chains
}

// fuseChain returns s with the modules of chain (a fusable chain) replaced by
// one module where the first of them was, running the chain's fused model or
// choosing among its fused variants.
func fuseChain(s api.Session, chain fusable) api.Session {
	in := make(map[string]bool, len(chain.modules))
	for _, n := range chain.modules {
		in[n] = true
	}
	first, last := chain.modules[0], chain.modules[len(chain.modules)-1]
	name := strings.Join(chain.modules, FusionSep)
	out := s
	out.Modules = make([]api.Module, 0, len(s.Modules)-len(chain.modules)+1)
	for _, m := range s.Modules {
		if in[m.Name] {
			if m.Name == first {
				fm := m
				fm.Name, fm.Model, fm.Variants = name, chain.model, chain.variants
				out.Modules = append(out.Modules, fm)
			}
			continue
		}
		if len(m.After) > 0 {
			after := append([]string(nil), m.After...)
			for k, p := range after {
				if p == last {
					after[k] = name
				}
			}
			m.After = after
		}
		out.Modules = append(out.Modules, m)
	}
	out.JointAccuracy = fuseJoint(s, chain, name)
	return out
}

// fuseJoint returns s's joint accuracies for the session with chain fused
// into one module called name: each combination's variants of the chain's
// modules become the fused variant that runs them, and a combination whose
// fused variant the chain does not offer (no fused profile) is dropped, as
// the fused module cannot run it.
func fuseJoint(s api.Session, chain fusable, name string) []api.JointAccuracy {
	if len(chain.variants) == 0 || len(s.JointAccuracy) == 0 {
		return s.JointAccuracy // the chain has no variants: no entry names its modules
	}
	var out []api.JointAccuracy
	for _, ja := range s.JointAccuracy {
		models := make([]string, len(chain.modules))
		vs := maps.Clone(ja.Variants)
		for i, n := range chain.modules {
			if v, ok := ja.Variants[n]; ok {
				models[i] = v
				delete(vs, n)
			} else if j := moduleIndex(s, n); j >= 0 {
				models[i] = s.Modules[j].Model
			}
		}
		model := strings.Join(models, FusionSep)
		if !slices.ContainsFunc(chain.variants, func(v api.Variant) bool { return v.Model == model }) {
			continue
		}
		vs[name] = model
		ja.Variants = vs
		out = append(out, ja)
	}
	return out
}

func moduleIndex(s api.Session, name string) int {
	for i, m := range s.Modules {
		if m.Name == name {
			return i
		}
	}
	return -1
}
