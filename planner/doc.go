// Package planner is Piccolo's planner: given sessions, profiles and a hardware
// catalog it produces the minimum-cost plan that meets every session's SLO, as the
// Piccolo paper describes (§II–§IV), plus the systems the paper compares with.
//
// The pieces, each named as in the paper and exported under that name:
//
//   - latency models (wcl.go, LatencyModel): the worst-case latency of a config
//     group under TC dispatch (TheoremOne, Theorem 1 in §III-B: d + b/w; TCExact,
//     the exact collection time d + (b−1)/w), round-robin (RoundRobin, 2d) and
//     local throughput (LocalThroughput, d + b/t);
//   - the configuration generator (configgen.go, GenerateConfigs): Algorithm 1
//     (§III-B), multiple configs per module in throughput-cost order, full
//     machines plus one partial machine, and the grouped form where the machines
//     of one config share one batch stream;
//   - the dummy generator (dummy.go, GenerateDummy): §III-D, Theorem 2;
//   - the latency splitter (split.go, SplitLatency): Algorithm 2 (§III-C) on any
//     DAG, and the baselines' splits (throughput-based, cost-greedy, even,
//     quantized);
//   - reassignment of the remaining latency budget (plan.go, Reassign): §III-C;
//   - the exhaustive optimum and the quantized split's search (search.go), and an
//     independent plan checker (check.go, Check);
//   - the policies (policy.go): PolicySpecs made PlanningPolicies in a
//     PolicyRegistry (internal/registry's shape); BuiltinPolicies
//     holds piccolo, paper, the four baselines of Table III and optimal;
//   - operator fusion (fusion.go, Fuse): a config transformation that fuses a
//     chain of modules into one stage where its fused profile plans cheaper
//     (Cloudflow §4; docs/fusion.md);
//   - the planner benchmark (bench.go, workload.go): §IV-B's comparison on seeded
//     random workloads (piccolo bench planner);
//   - model variants (variants.go, variants_bench.go; JellyBean §4): a module
//     may be served by one of several models; the plan is the cheapest variant
//     combination whose accuracy product meets the session's target, each
//     combination planned in full (docs/variants.md).
//
// algorithms.go exports each algorithm over exported types (ConfigSet,
// ConfigParams) for callers that want one step rather than a whole plan.
//
// Plan is a pure function of its inputs: it starts no goroutines, keeps no state
// between calls and may be called from any goroutine. Policies are chosen by name
// from Options.Registry (BuiltinPolicies when nil; Policies lists its names);
// options switch individual features off for the ablations of §IV-C. A
// PolicyRegistry is immutable, like every registry.
//
// The strategies a policy combines are chosen by name from registries too
// (internal/registry): latency models (BuiltinModels: tc-exact, tc-theorem1,
// rr-2d, local), latency splits (BuiltinSplits: lc, throughput, cost, even,
// quantized; the optimum's exhaustive search is the split of policy
// optimal) and variant searches (BuiltinVariantSearches: climb, beam, all).
// Options.Strategies offers others beside them; a greedy Split only ranks
// moves (Score), so Algorithm 2's loop is written once.
package planner
