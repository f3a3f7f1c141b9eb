// Package scheduler is Piccolo's planner: given sessions, profiles and a hardware
// catalog it produces the minimum-cost plan that meets every session's SLO, as the
// Piccolo paper describes (§II–§IV), plus the systems the paper compares with.
//
// The pieces, each named as in the paper:
//
//   - latency models (wcl.go): the worst-case latency of a config group under TC
//     dispatch (Theorem 1, d + b/w, and the exact collection time d + (b−1)/w),
//     round-robin (2d) and local throughput (d + b/t);
//   - the configuration generator (configgen.go): Algorithm 1, multiple configs per
//     module in throughput-cost order, full machines plus one partial machine, and
//     the grouped form where the machines of one config share one batch stream;
//   - the dummy generator (dummy.go): §III-D, Theorem 2;
//   - the latency splitter (split.go): Algorithm 2 on any DAG, and the baselines'
//     splits (throughput-based, cost-greedy, even, quantized);
//   - reassignment of the remaining latency budget (reassign.go): §III-C;
//   - the exhaustive optimum (optimal.go) and an independent plan checker (check.go).
//
// Plan is a pure function of its inputs: it starts no goroutines, keeps no state
// between calls and may be called from any goroutine. Policies are chosen by name
// from Policies; options switch individual features off for the ablations of §IV-C.
package scheduler
