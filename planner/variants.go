package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Variant selection (JellyBean §4, docs/variants.md). A module that lists
// variants can be served by any of them; the session's accuracy estimate is the
// product of the chosen variants' accuracies (each is the share of right outputs
// given right inputs, so errors compound along the chain), and it must reach the
// session's target. The plan is the cheapest over the variant combinations that
// reach it, each combination planned by the policy in full (configs, SLO split,
// dummy rates), so the variant is chosen jointly with them.
//
// Which combinations are planned:
//   - exhaustive (policy optimal, or Options.VariantSearch "all"): every
//     combination that reaches the target;
//   - beam (every other policy): JellyBean's two steps. Model selection walks the
//     modules in reverse topological order keeping the BeamWidth partial
//     combinations of least estimated cost that can still reach the target (the
//     estimate of a variant is its cheapest cost of serving the module's rate:
//     rate × min price/throughput over its profile, latency ignored); then the
//     BeamWidth complete combinations are planned and the cheapest plan wins;
//   - climb (the default): every combination when at most MaxCombinations
//     reach the target (the exact choice, and planning one takes well under a
//     millisecond); beyond, the beam, then from its best plan one module's
//     variant changed at a time (two at a time when no single change helps),
//     planned, kept while the cost drops.

// MaxCombinations is how many variant combinations the default search plans
// all of; beyond, it runs the beam and climbs.
const MaxCombinations = 256

// BeamWidth is how many variant combinations the beam keeps and plans (JellyBean's
// B_MS).
const BeamWidth = 4

// accuracyEps absorbs rounding in the accuracy products.
const accuracyEps = 1e-9

// hasVariants reports whether some module of s lists variants.
func hasVariants(s *api.Session) bool {
	for i := range s.Modules {
		if len(s.Modules[i].Variants) > 0 {
			return true
		}
	}
	return false
}

// Combination is one variant per module (indexes into each module's Choices) with
// its accuracy product and estimated cost. Made by a VariantSpace.
type Combination struct {
	pick     []int
	accuracy float64
	estimate float64
}

// Pick returns the variant of each module: an index into its Choices, by
// module index.
func (c Combination) Pick() []int { return slices.Clone(c.pick) }

// Accuracy returns the combination's accuracy estimate, the product of its
// variants' accuracies.
func (c Combination) Accuracy() float64 { return c.accuracy }

// VariantSearch chooses which variant combinations of a session are planned
// (docs/variants.md). It is an immutable value chosen by name from a
// registry (Options.VariantSearch, --variant-search): BuiltinVariantSearches
// holds climb (the default), beam and all; Options.Strategies.VariantSearches
// may offer more. Every combination returned is planned in full and the
// cheapest plan wins (ties: the more accurate).
type VariantSearch interface {
	// Name is the name users choose the search by, e.g. "climb".
	Name() string
	// Combinations returns the combinations to plan, in order, from v.
	Combinations(v *VariantSpace) []Combination
	// Climb reports whether, when Combinations returned at most BeamWidth,
	// the best plan's variants are then changed one module (then two) at a
	// time, planned, and kept while the planned cost drops.
	Climb() bool
}

// VariantSpace is a session's variant choices as a VariantSearch sees them:
// the modules' variants and the accuracy target. Valid during the call.
type VariantSpace struct {
	cfg     *api.Config
	s       *api.Session
	choices [][]api.Variant
	acc     *accuracyRule
	target  float64
	pol     policy
}

// Variants returns how many variants module i (an index into the session's
// modules) may run.
func (v *VariantSpace) Variants(i int) int { return len(v.choices[i]) }

// Modules returns the number of modules.
func (v *VariantSpace) Modules() int { return len(v.choices) }

// Combination returns the combination pick (a variant index per module) and
// whether it reaches the accuracy target.
func (v *VariantSpace) Combination(pick []int) (Combination, bool) {
	a := v.acc.of(pick)
	return Combination{pick: slices.Clone(pick), accuracy: a}, a >= v.target-accuracyEps
}

// All returns every combination that reaches the target, most accurate
// first, and true; a partial list and false when there are more than limit.
func (v *VariantSpace) All(limit int) ([]Combination, bool) {
	return allCombos(v.acc, v.target, limit)
}

// Beam returns JellyBean's model selection (§4): modules in reverse
// topological order, the width partial combinations of least estimated cost
// kept, each still able to reach the target (by the product of accuracies
// or a listed joint measurement; the combinations returned carry, and reach
// the target by, the session's rule).
func (v *VariantSpace) Beam(width int) []Combination {
	var out []Combination
	for _, c := range beamCombos(v.cfg, v.s, v.acc, v.target, width, v.pol) {
		if c.accuracy = v.acc.of(c.pick); c.accuracy >= v.target-accuracyEps {
			out = append(out, c)
		}
	}
	return out
}

// accuracyRule is a session's accuracy of a variant combination: the product
// of the picked variants' accuracies, or the combination's measured joint
// accuracy where the session lists one (api.Session.JointAccuracy;
// JellyBean's profiles of interactions). Read-only once made.
type accuracyRule struct {
	choices [][]api.Variant
	// joint holds the listed combinations as picks (a variant index per
	// module; modules without variants at 0) with their accuracies.
	joint []Combination
	byKey map[string]float64 // fmt.Sprint(pick) → measured accuracy
}

// newAccuracyRule returns s's rule over choices (s's modules' variants, each
// with its accuracy). Entries naming a variant not among choices are
// skipped (the loader refuses them in a config file).
func newAccuracyRule(s *api.Session, choices [][]api.Variant) *accuracyRule {
	r := &accuracyRule{choices: choices, byKey: map[string]float64{}}
	for _, ja := range s.JointAccuracy {
		pick := make([]int, len(choices))
		ok := true
		for i, m := range s.Modules {
			if len(m.Variants) == 0 {
				continue
			}
			pick[i] = slices.IndexFunc(choices[i], func(v api.Variant) bool { return v.Model == ja.Variants[m.Name] })
			ok = ok && pick[i] >= 0
		}
		if ok {
			r.joint = append(r.joint, Combination{pick: pick, accuracy: ja.Accuracy})
			r.byKey[fmt.Sprint(pick)] = ja.Accuracy
		}
	}
	return r
}

// of returns the accuracy of the combination pick.
func (r *accuracyRule) of(pick []int) float64 {
	if a, ok := r.lookup(pick); ok {
		return a
	}
	a := 1.0
	for i, j := range pick {
		a *= r.choices[i][j].Accuracy
	}
	return a
}

// measured reports whether pick's accuracy is a measured joint one.
func (r *accuracyRule) measured(pick []int) bool {
	_, ok := r.lookup(pick)
	return ok
}

// lookup returns pick's measured joint accuracy, if listed. A session
// without joint accuracies (the common case) pays no key.
func (r *accuracyRule) lookup(pick []int) (float64, bool) {
	if len(r.joint) == 0 {
		return 0, false
	}
	a, ok := r.byKey[fmt.Sprint(pick)]
	return a, ok
}

// reachable reports whether some combination agreeing with pick on the
// modules set so far (set[i]) may reach target: the bound on its product
// (bound: the product so far times the best the other modules can do) does,
// or a listed combination agreeing with it does.
func (r *accuracyRule) reachable(pick []int, set []bool, bound, target float64) bool {
	if bound >= target-accuracyEps {
		return true
	}
	for _, c := range r.joint {
		if c.accuracy < target-accuracyEps {
			continue
		}
		agrees := true
		for i, ok := range set {
			agrees = agrees && (!ok || c.pick[i] == pick[i])
		}
		if agrees {
			return true
		}
	}
	return false
}

// best returns the most accurate combination's accuracy and pick by the
// rule. Without joint measurements it is each module's most accurate
// variant. With them, a listed combination may be measured above or below
// its product, so every combination is scored when there are at most
// bestExact of them; beyond, the better of the most accurate variants and
// the listed combinations (an unlisted combination whose product beats a
// listed one measured low is then missed).
func (r *accuracyRule) best() (float64, []int) {
	pick := mostAccurate(r.choices)
	a := r.of(pick)
	if len(r.joint) == 0 {
		return a, pick
	}
	n := 1
	for _, vs := range r.choices {
		n *= len(vs)
		if n > bestExact {
			break
		}
	}
	if n <= bestExact {
		cur := make([]int, len(r.choices))
		var walk func(i int)
		walk = func(i int) {
			if i == len(cur) {
				if x := r.of(cur); x > a+accuracyEps {
					a, pick = x, slices.Clone(cur)
				}
				return
			}
			for j := range r.choices[i] {
				cur[i] = j
				walk(i + 1)
			}
		}
		walk(0)
		return a, pick
	}
	for _, c := range r.joint {
		if c.accuracy > a {
			a, pick = c.accuracy, c.pick
		}
	}
	return a, pick
}

// bestExact is how many combinations accuracyRule.best scores one by one.
const bestExact = 4096

// The built-in variant searches (BuiltinVariantSearches).
var (
	// VariantClimb, the default: every combination when at most
	// MaxCombinations reach the target; beyond, the beam, then the climb.
	VariantClimb VariantSearch = climbSearch{}
	// VariantBeam is JellyBean's beam alone.
	VariantBeam VariantSearch = beamSearch{}
	// VariantAll plans every combination that reaches the target (policy
	// optimal always does).
	VariantAll VariantSearch = allSearch{}
)

// BuiltinVariantSearches returns a registry of the built-in variant searches.
func BuiltinVariantSearches() *registry.Registry[VariantSearch] {
	return registry.Must(registry.New("variant search", "variant searches", VariantClimb, VariantBeam, VariantAll))
}

// defaultVariantSearches is the registry used when
// Options.Strategies.VariantSearches is nil.
var defaultVariantSearches = BuiltinVariantSearches()

type climbSearch struct{}

func (climbSearch) Name() string { return "climb" }
func (climbSearch) Climb() bool  { return true }
func (climbSearch) Combinations(v *VariantSpace) []Combination {
	if all, ok := v.All(MaxCombinations); ok {
		return all // few enough to plan them all: the exact choice
	}
	return v.Beam(BeamWidth)
}

type beamSearch struct{}

func (beamSearch) Name() string                               { return "beam" }
func (beamSearch) Climb() bool                                { return false }
func (beamSearch) Combinations(v *VariantSpace) []Combination { return v.Beam(BeamWidth) }

type allSearch struct{}

func (allSearch) Name() string { return "all" }
func (allSearch) Climb() bool  { return false }
func (allSearch) Combinations(v *VariantSpace) []Combination {
	all, _ := v.All(math.MaxInt)
	return all
}

// planVariants plans session s, choosing its variants (see above). A session
// without variants is planned as it is.
func planVariants(cfg *api.Config, s *api.Session, pol policy) (api.SessionPlan, error) {
	if !hasVariants(s) {
		return planSession(cfg, s, pol)
	}
	choices := make([][]api.Variant, len(s.Modules))
	for i := range s.Modules {
		choices[i] = slices.Clone(s.Modules[i].Choices())
		for j := range choices[i] {
			if choices[i][j].Accuracy == 0 { // a Config built in Go: from the profile
				choices[i][j].Accuracy = cfg.ModelAccuracy(choices[i][j].Model)
			}
		}
	}
	rule := newAccuracyRule(s, choices)
	best, bestPick := rule.best()
	target := best
	if s.Accuracy != nil {
		target = *s.Accuracy
	}
	if target > best+accuracyEps {
		return api.SessionPlan{}, fmt.Errorf("session %q: %w: accuracy target %.4g is above the most accurate combination's %.4g (%s)",
			s.Name, ErrInfeasible, target, best, describeCombo(s, choices, bestPick))
	}
	combos := pol.variants.Combinations(&VariantSpace{cfg: cfg, s: s, choices: choices, acc: rule, target: target, pol: pol})
	var bestPlan api.SessionPlan
	var bestCombo Combination
	var errs []error
	found := false
	planned := map[string]bool{}
	try := func(c Combination) bool {
		key := fmt.Sprint(c.pick)
		if planned[key] {
			return false
		}
		planned[key] = true
		sp, err := planSession(cfg, withVariants(s, choices, c.pick), pol)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		if !found || sp.Cost < bestPlan.Cost-1e-12 || (sp.Cost <= bestPlan.Cost+1e-12 && c.accuracy > bestPlan.Accuracy) {
			annotate(&sp, s, choices, c, target)
			sp.AccuracyJoint = rule.measured(c.pick)
			bestPlan, bestCombo, found = sp, c, true
			return true
		}
		return false
	}
	for _, c := range combos {
		try(c)
	}
	// climb: from the best plan, change one module's variant at a time (keeping
	// the target) while the planned cost drops. The beam ranks by a cost estimate
	// that ignores latency; this corrects it with the planner's own costs.
	accOf := rule.of
	// move tries from with module i at variant j (and module k at l when k ≥ 0).
	move := func(from Combination, i, j, k, l int) bool {
		c := Combination{pick: slices.Clone(from.pick)}
		c.pick[i] = j
		if k >= 0 {
			c.pick[k] = l
		}
		if c.accuracy = accOf(c.pick); c.accuracy < target-accuracyEps {
			return false
		}
		return try(c)
	}
	for improved := pol.variants.Climb() && len(combos) <= BeamWidth && found; improved; {
		improved = false
		from := bestCombo
		for i := range choices {
			for j := range choices[i] {
				if j != from.pick[i] && move(from, i, j, -1, 0) {
					improved = true
				}
			}
		}
		if improved {
			continue
		}
		// No single change helps: try two at once (one module up, another
		// down gets past a target the single changes sit on).
		for i := range choices {
			for k := i + 1; k < len(choices); k++ {
				for j := range choices[i] {
					for l := range choices[k] {
						if j != from.pick[i] && l != from.pick[k] && move(from, i, j, k, l) {
							improved = true
						}
					}
				}
			}
		}
	}
	if !found {
		if len(errs) == 0 {
			return api.SessionPlan{}, fmt.Errorf("session %q: %w: no variant combination reaches accuracy %.4g", s.Name, ErrInfeasible, target)
		}
		// The combinations fail on the SLO: name the most accurate one's reason.
		return api.SessionPlan{}, fmt.Errorf("%w (every variant combination reaching accuracy %.4g misses the SLO)", errs[0], target)
	}
	return bestPlan, nil
}

// withVariants returns a copy of s whose modules name the picked variants' models.
func withVariants(s *api.Session, choices [][]api.Variant, pick []int) *api.Session {
	out := *s
	out.Modules = slices.Clone(s.Modules)
	for i := range out.Modules {
		out.Modules[i].Model = choices[i][pick[i]].Model
		out.Modules[i].Variants = nil
	}
	return &out
}

// annotate records the chosen variants and accuracies in sp.
func annotate(sp *api.SessionPlan, s *api.Session, choices [][]api.Variant, c Combination, target float64) {
	sp.Accuracy, sp.AccuracyTarget = c.accuracy, target
	for i := range sp.Modules {
		j := slices.IndexFunc(s.Modules, func(m api.Module) bool { return m.Name == sp.Modules[i].Name })
		if j < 0 || len(s.Modules[j].Variants) == 0 {
			continue
		}
		v := choices[j][c.pick[j]]
		sp.Modules[i].Variant, sp.Modules[i].Accuracy = v.Model, v.Accuracy
	}
}

// allCombos lists every combination whose accuracy (by rule) reaches target,
// most accurate first; false (and a partial list) when there are more than
// limit.
func allCombos(rule *accuracyRule, target float64, limit int) ([]Combination, bool) {
	choices := rule.choices
	var out []Combination
	pick := make([]int, len(choices))
	set := make([]bool, len(choices))
	var walk func(i int, acc float64)
	walk = func(i int, acc float64) {
		// Accuracies are at most 1: the product only falls from here.
		for k := range set {
			set[k] = k < i
		}
		if !rule.reachable(pick, set, acc, target) || len(out) > limit {
			return
		}
		if i == len(choices) {
			if a := rule.of(pick); a >= target-accuracyEps {
				out = append(out, Combination{pick: slices.Clone(pick), accuracy: a})
			}
			return
		}
		for j, v := range choices[i] {
			pick[i] = j
			walk(i+1, acc*v.Accuracy)
		}
	}
	walk(0, 1)
	if len(out) > limit {
		return out, false
	}
	slices.SortStableFunc(out, func(a, b Combination) int { return cmp.Compare(b.accuracy, a.accuracy) })
	return out, true
}

// beamCombos is JellyBean's model selection: modules in reverse topological
// order, width partial combinations kept by estimated cost, each still able to
// reach target with the best variants of the modules not yet assigned.
func beamCombos(cfg *api.Config, s *api.Session, rule *accuracyRule, target float64, width int, pol policy) []Combination {
	choices := rule.choices
	order, err := s.TopoOrder()
	if err != nil {
		order = make([]int, len(s.Modules))
		for i := range order {
			order[i] = i
		}
	}
	// Each module's share of the SLO for the estimate: the SLO over the number
	// of modules on the longest chain.
	depth := make([]int, len(s.Modules))
	chain := 1
	for _, i := range order {
		depth[i] = 1
		for _, a := range s.Modules[i].After {
			if j := slices.IndexFunc(s.Modules, func(m api.Module) bool { return m.Name == a }); j >= 0 {
				depth[i] = max(depth[i], depth[j]+1)
			}
		}
		chain = max(chain, depth[i])
	}
	budget := s.SLO.Seconds() / float64(chain)
	slices.Reverse(order)
	// bound[k]: the best accuracy the modules order[k:] can reach.
	bound := make([]float64, len(order)+1)
	bound[len(order)] = 1
	for k := len(order) - 1; k >= 0; k-- {
		top := 0.0
		for _, v := range choices[order[k]] {
			top = math.Max(top, v.Accuracy)
		}
		bound[k] = bound[k+1] * top
	}
	beam := []Combination{{pick: make([]int, len(choices)), accuracy: 1}}
	set := make([]bool, len(choices))
	for k, i := range order {
		rate := s.Modules[i].Rate
		set[i] = true
		var next []Combination
		for _, c := range beam {
			for j, v := range choices[i] {
				acc := c.accuracy * v.Accuracy
				n := Combination{pick: slices.Clone(c.pick), accuracy: acc}
				n.pick[i] = j
				if !rule.reachable(n.pick, set, acc*bound[k+1], target) {
					continue
				}
				n.estimate = c.estimate + estimateCost(cfg, v.Model, rate, budget, pol)
				next = append(next, n)
			}
		}
		slices.SortStableFunc(next, func(a, b Combination) int {
			if c := cmp.Compare(a.estimate, b.estimate); c != 0 {
				return c
			}
			return cmp.Compare(b.accuracy, a.accuracy)
		})
		beam = next[:min(len(next), width)]
	}
	return beam
}

// estimateCost is the cost of serving rate req/s with model within budget
// seconds, as the policy's config generator plans it; when nothing fits the
// budget, the cheapest cost with latency ignored (rate × min price/throughput)
// times 10.
func estimateCost(cfg *api.Config, model string, rate, budget float64, pol policy) float64 {
	if cands, err := candidates(cfg, model, pol.filter); err == nil {
		if r, ok := planModule(cands, rate, budget, pol.gen, pol.dummy); ok {
			return r.cost
		}
	}
	best := math.Inf(1)
	for _, p := range cfg.ProfilesOf(model) {
		hw, ok := cfg.HardwareByName(p.Hardware)
		if !ok {
			continue
		}
		for _, e := range p.Entries {
			if t := e.Throughput(); t > 0 {
				best = math.Min(best, hw.Price/t)
			}
		}
	}
	return 10 * rate * best
}

// mostAccurate picks each module's most accurate variant (the first on ties).
func mostAccurate(choices [][]api.Variant) []int {
	pick := make([]int, len(choices))
	for i, vs := range choices {
		for j, v := range vs {
			if v.Accuracy > vs[pick[i]].Accuracy {
				pick[i] = j
			}
		}
	}
	return pick
}

// MostAccurate returns a copy of cfg in which every module with variants names
// its most accurate one: the baseline that always pays for the best models.
func MostAccurate(cfg *api.Config) *api.Config {
	out := *cfg
	out.Sessions = slices.Clone(cfg.Sessions)
	for i := range out.Sessions {
		s := &out.Sessions[i]
		if !hasVariants(s) {
			continue
		}
		choices := make([][]api.Variant, len(s.Modules))
		for j := range s.Modules {
			choices[j] = s.Modules[j].Choices()
		}
		*s = *withVariants(s, choices, mostAccurate(choices))
		s.Accuracy = nil
	}
	return &out
}

func describeCombo(s *api.Session, choices [][]api.Variant, pick []int) string {
	var parts []string
	for i, m := range s.Modules {
		if len(m.Variants) > 0 {
			v := choices[i][pick[i]]
			parts = append(parts, fmt.Sprintf("%s %s %.4g", m.Name, v.Model, v.Accuracy))
		}
	}
	return strings.Join(parts, ", ")
}
