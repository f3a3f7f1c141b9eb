package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Options choose a policy by name and switch features off for the ablations of
// §IV-C. The zero value plans with policy "piccolo" and its defaults.
type Options struct {
	// Policy is one of Policies (default "piccolo").
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
}

// Policies lists the policy names Plan accepts, in the order the paper's Table III
// lists the systems, then the brute force.
var Policies = []string{"piccolo", "paper", "nexus", "scrooge", "inferline", "clipper", "optimal"}

// policy is a resolved policy: every knob the planner reads.
type policy struct {
	name       string
	model      LatencyModel
	gen        genParams
	split      splitKind
	quantum    float64 // seconds
	dummy      bool
	reassign   int // 0: none, 1: once, -1: until nothing improves
	filter     filter
	singleHW   bool
	optimal    bool
	defaultU   float64
	reference  string
	maxConfigs int
}

func basePolicy(name string) (policy, error) {
	switch name {
	case "", "piccolo":
		// Theorem 1 read literally: a config's machines share one batch stream,
		// with the exact collection time (b−1)/w (docs/latency-models.md).
		return policy{name: "piccolo", model: TCExact, gen: genParams{grouped: true}, split: splitLC, dummy: true, reassign: -1, defaultU: 0.8}, nil
	case "paper":
		// Piccolo as published: Algorithm 1 plans ⌊n⌋ full machines and then the
		// residual at its own rate, with Theorem 1's d + b/w.
		return policy{name: "paper", model: TheoremOne, split: splitLC, dummy: true, reassign: -1, defaultU: 1}, nil
	case "nexus":
		// Table III: batching only, 2d, two configs, quantized split.
		return policy{name: "nexus", model: RoundRobin, maxConfigs: 2, split: splitQuantized, quantum: 0.01,
			filter: filter{noMultiplexing: true}, singleHW: true, defaultU: 1}, nil
	case "scrooge":
		// Table III: batching, multiplexing, heterogeneity; d + b/t; two configs;
		// throughput-based split.
		return policy{name: "scrooge", model: LocalThroughput, maxConfigs: 2, split: splitThroughput, defaultU: 1}, nil
	case "inferline":
		// Table III: batching and heterogeneity; 2d; one config; greedy split.
		return policy{name: "inferline", model: RoundRobin, maxConfigs: 1, split: splitCost,
			filter: filter{noMultiplexing: true}, defaultU: 1}, nil
	case "clipper":
		// Table III: batching only; 2d; one config; even split.
		return policy{name: "clipper", model: RoundRobin, maxConfigs: 1, split: splitEven,
			filter: filter{noMultiplexing: true}, singleHW: true, defaultU: 1}, nil
	case "optimal":
		return policy{name: "optimal", optimal: true}, nil
	}
	return policy{}, fmt.Errorf("unknown policy %q; allowed: %s", name, strings.Join(Policies, ", "))
}

// resolve turns Options into a policy, validating every field.
func resolve(o Options) (policy, error) {
	p, err := basePolicy(o.Policy)
	if err != nil {
		return p, err
	}
	if p.optimal {
		ref := o.Reference
		if ref == "" {
			ref = "piccolo"
		}
		if ref == "optimal" {
			return p, fmt.Errorf("optimal's reference policy must be another policy, not optimal")
		}
		rp, err := basePolicy(ref)
		if err != nil {
			return p, fmt.Errorf("optimal reference: %w", err)
		}
		rp.name, rp.optimal, rp.reference = "optimal", true, rp.name
		p = rp
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
		m, err := ModelByName(o.Model)
		if err != nil {
			return p, err
		}
		p.model = m
	}
	p.gen.model = p.model
	p.gen.maxConfigs = p.maxConfigs
	if o.Split != "" {
		switch s := splitKind(o.Split); s {
		case splitLC, splitThroughput, splitCost, splitEven, splitQuantized:
			p.split = s
		default:
			return p, fmt.Errorf("unknown split %q; allowed: lc, throughput, cost, even, quantized", o.Split)
		}
	}
	if o.Quantum < 0 {
		return p, fmt.Errorf("quantum %v: must be > 0", o.Quantum)
	}
	if o.Quantum > 0 {
		p.quantum = o.Quantum.Seconds()
	}
	if p.split == splitQuantized && p.quantum == 0 {
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
	return p, nil
}

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
