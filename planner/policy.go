package planner

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Options choose a policy by name and switch features off for the ablations of
// §IV-C. The zero value plans with policy "piccolo" and its defaults.
type Options struct {
	// Policy is a name in Registry (default "piccolo").
	Policy string
	// NoDummy disables the dummy generator (Picc-nd).
	NoDummy bool
	// NoReassign disables reassignment of the remaining budget (Picc-0re);
	// ReassignOnce reassigns to one module only (Picc-1re).
	NoReassign, ReassignOnce bool
	// MaxConfigs bounds the distinct configs per module (Picc-1bpc, Picc-2bpc);
	// 0 keeps the policy's own bound.
	MaxConfigs int
	// MaxUtilization is the headroom: machines are sized to run at most this
	// share of their profiled throughput, in (0, 1]. 0 keeps the policy's default
	// (0.8 for piccolo, which serves; 1 for the reproductions and baselines).
	MaxUtilization float64
	// SessionUtilization, by session name, replaces MaxUtilization for that
	// session (each in (0, 1]): the burst check (simulate.PlanForBursts)
	// gives each session the headroom its own simulation needs, so one
	// session's bursts do not buy headroom for every other. The plan
	// records such a session's cap in its SessionPlan.MaxUtilization.
	SessionUtilization map[string]float64
	// Model overrides the latency model: tc-exact, tc-theorem1, rr-2d (Picc-2d)
	// or local (Picc-dt). Empty keeps the policy's.
	Model string
	// Split overrides the latency split: lc, throughput (Picc-tb), cost, even or
	// quantized (with Quantum; Picc-q0.01 and Picc-q0.1). Empty keeps the policy's.
	Split string
	// Quantum is the step of a quantized split (default 10ms).
	Quantum time.Duration
	// NoBatching plans with batch 1 only (Picc-nb); NoMultiplexing with
	// concurrency 1 only (Picc-np); SingleHardware with the one hardware type
	// that gives the cheapest plan (Picc-nh).
	NoBatching, NoMultiplexing, SingleHardware bool
	// Hardware restricts planning to one named hardware type.
	Hardware string
	// Reference, for policy "optimal", names the policy whose latency model and
	// config-set form the exhaustive search uses (default "piccolo").
	Reference string
	// Registry is where Policy and Reference are looked up (nil: BuiltinPolicies).
	Registry *PolicyRegistry
	// VariantSearch chooses how the variants of a session are searched
	// (docs/variants.md): "climb" (the default: JellyBean's beam, then single
	// changes while the planned cost drops), "beam" (JellyBean's beam only) or
	// "all" (every combination that reaches the accuracy target; policy optimal
	// always searches all), or another name in Strategies.VariantSearches.
	VariantSearch string
	// Strategies are the registries Model, Split and VariantSearch are
	// looked up in; a nil field is the built-in registry.
	Strategies Strategies
	// Pool, when not nil, is how many devices each hardware type it names
	// has (types it does not name are unbounded): a session whose plan
	// needs more devices of a type than are left after the sessions before
	// it has a module's group split across types, k whole machines on the
	// short type and the rest of its rate on another, each group within the
	// module's WCL (docs/calibration.md, "Pool-aware planning"). Not a
	// paper feature; nil plans as the paper does. Counts must be ≥ 0.
	Pool map[string]int
}

// Strategies are the registries of the planner's strategies, each chosen by
// name: latency models (Options.Model; BuiltinModels), latency splits
// (Options.Split; BuiltinSplits) and variant searches
// (Options.VariantSearch; BuiltinVariantSearches). main builds them; a nil
// field means the built-in registry. Immutable registries: share freely.
type Strategies struct {
	Models          *registry.Registry[LatencyModel]
	Splits          *registry.Registry[Split]
	VariantSearches *registry.Registry[VariantSearch]
}

// orDefault returns st with every nil registry the built-in one.
func (st Strategies) orDefault() Strategies {
	if st.Models == nil {
		st.Models = defaultModels
	}
	if st.Splits == nil {
		st.Splits = defaultSplits
	}
	if st.VariantSearches == nil {
		st.VariantSearches = defaultVariantSearches
	}
	return st
}

// Policies lists the policy names Plan accepts by default (BuiltinPolicies), in the
// order the paper's Table III lists the systems, then the brute force.
var Policies = BuiltinPolicies().Names()

// PolicySpec is a planning policy: every knob the planner reads. A new baseline is
// a PolicySpec made a PlanningPolicy by name (NewPlanningPolicy) and added to a
// PolicyRegistry (With); the planner's core does not change.
type PolicySpec struct {
	// Model is the latency model the config generator and split use (nil: TCExact).
	Model LatencyModel
	// Grouped plans one group per module whose machines share one batch stream
	// (policy piccolo); false runs Algorithm 1 as published (§III-B).
	Grouped bool
	// MaxConfigs bounds the distinct configs per module (0: any).
	MaxConfigs int
	// Split is the latency split: lc (Algorithm 2, §III-C), throughput, cost,
	// even or quantized (empty: lc).
	Split string
	// Quantum is the step of a quantized split (0: 10ms).
	Quantum time.Duration
	// Dummy turns the dummy generator on (§III-D).
	Dummy bool
	// Reassign is how many rounds of reassignment of the remaining budget run
	// (§III-C): 0 none, −1 until nothing improves.
	Reassign int
	// NoMultiplexing plans with concurrency 1 only; SingleHardware with the one
	// hardware type that gives the cheapest plan.
	NoMultiplexing, SingleHardware bool
	// MaxUtilization is the policy's default headroom, in (0, 1] (0: 1).
	MaxUtilization float64
	// Optimal makes the policy the exhaustive search under the latency model and
	// config-set form of Options.Reference (another registered policy).
	Optimal bool
}

// PlanningPolicy is a policy a PolicyRegistry holds: a PolicySpec checked and
// resolved under its name (NewPlanningPolicy). Immutable.
type PlanningPolicy struct{ p policy }

// Name is the policy's name, as Options.Policy chooses it.
func (p PlanningPolicy) Name() string { return p.p.name }

// NewPlanningPolicy returns the policy s under name, for NewPolicyRegistry or
// PolicyRegistry.With. Errors name the policy and the knob: an unknown split,
// max configs < 0, a quantum < 0, max utilization outside (0, 1], reassign < −1.
// (An empty name is the registry's error.)
func NewPlanningPolicy(name string, s PolicySpec) (PlanningPolicy, error) {
	p := policy{name: name, model: s.Model, gen: genParams{grouped: s.Grouped},
		quantum: s.Quantum.Seconds(), dummy: s.Dummy, reassign: s.Reassign, defaultU: s.MaxUtilization,
		filter: filter{noMultiplexing: s.NoMultiplexing}, singleHW: s.SingleHardware, optimal: s.Optimal, maxConfigs: s.MaxConfigs}
	if p.model == nil {
		p.model = TCExact
	}
	p.split = SplitLC
	if s.Split != "" {
		sp, err := defaultSplits.Lookup(s.Split)
		if err != nil {
			return PlanningPolicy{}, fmt.Errorf("policy %q: %w", name, err)
		}
		p.split = sp
	}
	if p.defaultU == 0 {
		p.defaultU = 1
	}
	switch {
	case s.MaxConfigs < 0:
		return PlanningPolicy{}, fmt.Errorf("policy %q: max configs %d: must be ≥ 0 (0 = no bound)", name, s.MaxConfigs)
	case s.Quantum < 0:
		return PlanningPolicy{}, fmt.Errorf("policy %q: quantum %v: must be > 0", name, s.Quantum)
	case p.defaultU < 0 || p.defaultU > 1 || p.defaultU != p.defaultU:
		return PlanningPolicy{}, fmt.Errorf("policy %q: max utilization %v: must be in (0, 1]", name, s.MaxUtilization)
	case s.Reassign < -1:
		return PlanningPolicy{}, fmt.Errorf("policy %q: reassign %d: must be ≥ −1 (−1 = until nothing improves)", name, s.Reassign)
	}
	return PlanningPolicy{p}, nil
}

// PolicyRegistry holds the planning policies Options.Policy may name: a
// registry.Registry, the one shape of every strategy registry. Build one with
// NewPolicyRegistry or BuiltinPolicies().With; it is immutable after, so any
// goroutine may plan with it.
type PolicyRegistry = registry.Registry[PlanningPolicy]

// NewPolicyRegistry returns a registry of policies, listed (Names, error
// messages) in the order given. An empty name or two policies of one name is
// an error naming it.
func NewPolicyRegistry(policies ...PlanningPolicy) (*PolicyRegistry, error) {
	return registry.New("policy", "policies", policies...)
}

// BuiltinPolicies returns a registry holding Piccolo, the paper's Piccolo, the
// four systems of the paper's Table III and the exhaustive optimum.
func BuiltinPolicies() *PolicyRegistry {
	var ps []PlanningPolicy
	for _, e := range []struct {
		name string
		spec PolicySpec
	}{
		// Theorem 1 read literally: a config's machines share one batch stream,
		// with the exact collection time (b−1)/w (docs/planner.md).
		{"piccolo", PolicySpec{Model: TCExact, Grouped: true, Dummy: true, Reassign: -1, MaxUtilization: 0.8}},
		// Piccolo as published: Algorithm 1 plans ⌊n⌋ full machines and then the
		// residual at its own rate, with Theorem 1's d + b/w.
		{"paper", PolicySpec{Model: TheoremOne, Dummy: true, Reassign: -1}},
		// Table III: batching only, 2d, two configs, quantized split.
		{"nexus", PolicySpec{Model: RoundRobin, MaxConfigs: 2, Split: SplitQuantized.Name(), Quantum: 10 * time.Millisecond,
			NoMultiplexing: true, SingleHardware: true}},
		// Table III: batching, multiplexing, heterogeneity; d + b/t; two configs;
		// throughput-based split.
		{"scrooge", PolicySpec{Model: LocalThroughput, MaxConfigs: 2, Split: SplitThroughput.Name()}},
		// Table III: batching and heterogeneity; 2d; one config; greedy split.
		{"inferline", PolicySpec{Model: RoundRobin, MaxConfigs: 1, Split: SplitCost.Name(), NoMultiplexing: true}},
		// Table III: batching only; 2d; one config; even split.
		{"clipper", PolicySpec{Model: RoundRobin, MaxConfigs: 1, Split: SplitEven.Name(), NoMultiplexing: true, SingleHardware: true}},
		{"optimal", PolicySpec{Optimal: true}},
	} {
		p, err := NewPlanningPolicy(e.name, e.spec)
		if err != nil {
			panic(err) // a typo in the table above, caught by every test
		}
		ps = append(ps, p)
	}
	return registry.Must(NewPolicyRegistry(ps...)) // constant, distinct names (TestPolicyRegistry)
}

// policy is a resolved policy: every knob the planner reads.
type policy struct {
	name       string
	model      LatencyModel
	gen        genParams
	split      Split
	quantum    float64 // seconds
	dummy      bool
	reassign   int // 0: none, 1: once, -1: until nothing improves
	filter     filter
	singleHW   bool
	optimal    bool
	defaultU   float64
	reference  string
	maxConfigs int
	variants   VariantSearch
	pool       map[string]int // devices per hardware type left (Options.Pool); nil: unbounded
}

// resolve turns Options into a policy, validating every field.
func resolve(o Options) (policy, error) {
	reg := o.Registry
	if reg == nil {
		reg = defaultPolicies
	}
	name := o.Policy
	if name == "" {
		name = "piccolo"
	}
	pp, err := reg.Lookup(name)
	if err != nil {
		return policy{}, err
	}
	p := pp.p
	if p.optimal {
		ref := o.Reference
		if ref == "" {
			ref = "piccolo"
		}
		rpp, err := reg.Lookup(ref)
		if err != nil {
			return p, fmt.Errorf("optimal reference: %w", err)
		}
		rp := rpp.p
		if rp.optimal {
			return p, fmt.Errorf("optimal's reference policy must be another policy, not %q", ref)
		}
		rp.name, rp.optimal, rp.reference = p.name, true, rp.name
		rp.split = optimalSplit{}
		p = rp
	}
	st := o.Strategies.orDefault()
	search := o.VariantSearch
	if search == "" {
		search = VariantClimb.Name()
	}
	vs, err := st.VariantSearches.Lookup(search)
	if err != nil {
		return p, err
	}
	p.variants = vs
	if p.optimal {
		p.variants = VariantAll
	}
	if o.MaxConfigs < 0 {
		return p, fmt.Errorf("max configs %d: must be ≥ 0 (0 = no bound)", o.MaxConfigs)
	}
	if o.MaxConfigs > 0 {
		// A grouped plan (piccolo) uses one config per module anyway.
		p.maxConfigs = o.MaxConfigs
	}
	u := o.MaxUtilization
	switch {
	case u == 0:
		u = p.defaultU
	case u < 0 || u > 1 || u != u:
		return p, fmt.Errorf("max utilization %v: must be in (0, 1] (1 = no headroom)", o.MaxUtilization)
	}
	p.gen.util = u
	if o.Model != "" {
		m, err := st.Models.Lookup(o.Model)
		if err != nil {
			return p, err
		}
		p.model = m
	}
	p.gen.model = p.model
	p.gen.maxConfigs = p.maxConfigs
	if o.Split != "" {
		sp, err := st.Splits.Lookup(o.Split)
		if err != nil {
			return p, err
		}
		if !p.optimal { // the optimum is its own search
			p.split = sp
		}
	}
	if o.Quantum < 0 {
		return p, fmt.Errorf("quantum %v: must be > 0", o.Quantum)
	}
	if o.Quantum > 0 {
		p.quantum = o.Quantum.Seconds()
	}
	if p.split == SplitQuantized && p.quantum == 0 {
		p.quantum = 0.01
	}
	if o.NoDummy {
		p.dummy = false
	}
	if o.NoReassign {
		p.reassign = 0
	} else if o.ReassignOnce {
		p.reassign = 1
	}
	if o.NoBatching {
		p.filter.noBatching = true
	}
	if o.NoMultiplexing {
		p.filter.noMultiplexing = true
	}
	if o.SingleHardware {
		p.singleHW = true
	}
	if o.Hardware != "" {
		p.filter.hardware = o.Hardware
		p.singleHW = false
	}
	for _, hw := range slices.Sorted(maps.Keys(o.Pool)) {
		if o.Pool[hw] < 0 {
			return p, fmt.Errorf("pool: hardware %q has %d devices: must be ≥ 0", hw, o.Pool[hw])
		}
	}
	if o.Pool != nil {
		p.pool = maps.Clone(o.Pool)
	}
	return p, nil
}

// defaultPolicies is the registry Plan uses when Options.Registry is nil.
var defaultPolicies = BuiltinPolicies()

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}
