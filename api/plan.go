package api

import "iter"

// Plan is the planner's output, the JSON `piccolo plan -o json` prints (its
// latency models: docs/planner.md): per session, per module, the budget, WCL,
// dummy rate and config groups. Every policy writes this shape, so any
// plan can be re-checked (Check), simulated or served. Immutable once published.
type Plan struct {
	Policy string `json:"policy"`
	// LatencyModel names the WCL formula the policy planned with, so a checker can
	// recompute every group's WCL from this JSON alone: "tc-exact" (d + (b−1)/w),
	// "tc-theorem1" (d + b/w), "rr-2d" (2d) or "local" (d + b/t).
	LatencyModel string `json:"latency_model,omitempty"`
	// MaxUtilization is the headroom the plan keeps: groups are sized so that each
	// machine runs at most this share of its profiled throughput (1 = no headroom).
	MaxUtilization float64       `json:"max_utilization,omitempty"`
	TotalCost      float64       `json:"total_cost"`
	RuntimeMs      float64       `json:"runtime_ms"`
	Sessions       []SessionPlan `json:"sessions"`
}

// SessionPlan is the plan of one session. Error is set, and Modules empty, when the
// session could not be planned (infeasible SLO); the other sessions are still planned.
type SessionPlan struct {
	Name      string  `json:"name"`
	SLOMs     float64 `json:"slo_ms"`
	LatencyMs float64 `json:"latency_ms"`
	Cost      float64 `json:"cost"`
	// Accuracy is the session's end-to-end accuracy estimate for the chosen
	// variants (the product of the modules' accuracies) and AccuracyTarget the
	// target it had to meet; both are omitted for a session without variants.
	Accuracy       float64 `json:"accuracy,omitempty"`
	AccuracyTarget float64 `json:"accuracy_target,omitempty"`
	// AccuracyJoint: Accuracy is the combination's measured joint accuracy
	// (Session.JointAccuracy), not the product.
	AccuracyJoint bool         `json:"accuracy_joint,omitempty"`
	Modules       []ModulePlan `json:"modules"`
	Error         string       `json:"error,omitempty"`
	// MaxUtilization, when not 0, is the cap this session was planned at
	// instead of the plan's (the burst check gives each session its own
	// headroom); 0: the plan's MaxUtilization.
	MaxUtilization float64 `json:"max_utilization,omitempty"`
}

// Utilization is the cap session plan sp of p was planned at: its own, else
// p's; 1 when neither is given (no headroom).
func (p *Plan) Utilization(sp *SessionPlan) float64 {
	switch {
	case sp.MaxUtilization > 0:
		return sp.MaxUtilization
	case p.MaxUtilization > 0:
		return p.MaxUtilization
	}
	return 1
}

// ModulePlan is the plan of one module. Rate is the module's request rate (req/s)
// without dummies; DummyRate the synthetic rate added (paper §III-D); BudgetMs the
// latency budget from the splitter (Algorithm 2); WCLMs the maximum over its groups.
//
// For a module with variants, Variant is the chosen variant's model (the same as
// Model, which the data plane serves) and Accuracy its accuracy; both are
// omitted for a module with one model. Join and Race are the module's
// (Module.Join, Module.Race): Race machines run each batch, and the groups'
// Machines and Cost count all of them; for a module with race: auto, Race is
// the number the planner chose (0: no race). Tail is the module's measured
// tail (Module.Tail), which the planner sized it for and the simulator draws
// from; the groups' DurationMs stay the profiled durations.
type ModulePlan struct {
	Name      string      `json:"name"`
	Model     string      `json:"model"`
	Variant   string      `json:"variant,omitempty"`
	Accuracy  float64     `json:"accuracy,omitempty"`
	After     []string    `json:"after,omitempty"`
	Join      string      `json:"join,omitempty"`
	Race      int         `json:"race,omitempty"`
	Tail      *Tail       `json:"tail,omitempty"`
	FanOut    FanOut      `json:"fanout,omitempty"`
	Rate      float64     `json:"rate"`
	DummyRate float64     `json:"dummy_rate"`
	BudgetMs  float64     `json:"budget_ms"`
	WCLMs     float64     `json:"wcl_ms"`
	Cost      float64     `json:"cost"`
	Configs   []GroupPlan `json:"configs"`
}

// GroupPlan is one config group: Machines (fractional: occupancy) running one config
// that share one batch stream. Groups are listed in throughput-cost order; a group's
// WCL is d + b/w with w the Rate of this group and of every group after it
// (Theorem 1), unless the plan's policy documents another latency model.
// Rate is what the group carries, dummies included; Cost = Machines × price.
//
// TailMs, for a module planned for its measured tail (ModulePlan.Tail), is
// the batch duration in ms the group's WCL is computed with: Factor ×
// DurationMs where the group's machines are sized for every batch to be slow
// (headroom), 2 × Factor × DurationMs where they are sized for the mean and
// a batch may wait behind one slow batch and be slow itself (held up); 0
// (omitted) where the WCL is computed with DurationMs (planner.TailMiss,
// docs/planner.md "Choosing the race from a measured tail"). DurationMs and
// Throughput stay the profile's: the data plane and the simulator run them.
type GroupPlan struct {
	Hardware    string   `json:"hardware"`
	Price       float64  `json:"price"`
	Batch       int      `json:"batch"`
	Concurrency int      `json:"concurrency"`
	DurationMs  float64  `json:"duration_ms"`
	TailMs      float64  `json:"tail_ms,omitempty"`
	Throughput  float64  `json:"throughput"`
	Machines    float64  `json:"machines"`
	Rate        float64  `json:"rate"`
	WCLMs       float64  `json:"wcl_ms"`
	Cost        float64  `json:"cost"`
	Backends    []string `json:"backends,omitempty"`
}

// PlacedMachine is one machine of a placed plan: the group it belongs to (in
// its session and module), its index among the group's machines, and the
// backend id it runs on (GroupPlan.Backends[Index]). The pointers are into the
// plan: read-only.
type PlacedMachine struct {
	Session *SessionPlan
	Module  *ModulePlan
	Group   *GroupPlan
	Index   int
	Backend string
}

// Machines yields every placed machine of p, in plan order (sessions, modules,
// groups, then GroupPlan.Backends), sessions with an Error included (they
// have no groups). An unplaced or nil plan yields nothing.
func (p *Plan) Machines() iter.Seq[PlacedMachine] {
	return func(yield func(PlacedMachine) bool) {
		if p == nil {
			return
		}
		for si := range p.Sessions {
			sp := &p.Sessions[si]
			for mi := range sp.Modules {
				mp := &sp.Modules[mi]
				for gi := range mp.Configs {
					g := &mp.Configs[gi]
					for i, id := range g.Backends {
						if !yield(PlacedMachine{Session: sp, Module: mp, Group: g, Index: i, Backend: id}) {
							return
						}
					}
				}
			}
		}
	}
}

// Placed reports whether any machine of p names a backend (a placed plan).
func (p *Plan) Placed() bool {
	for range p.Machines() {
		return true
	}
	return false
}

// Backends yields each backend id p is placed on once, in order of first use
// (slices.Sorted(p.Backends()) for a sorted list).
func (p *Plan) Backends() iter.Seq[string] {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for m := range p.Machines() {
			if seen[m.Backend] {
				continue
			}
			seen[m.Backend] = true
			if !yield(m.Backend) {
				return
			}
		}
	}
}
