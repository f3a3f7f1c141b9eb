// Package api holds the types every other package speaks: the operator's config
// (hardware catalog, profiles, sessions, static backends) and the planner's plan.
//
// Config values are produced by Load, which merges YAML files and validates them;
// once Load returns, a *Config is immutable and may be shared by any number of
// goroutines. Plan values are produced by the planner and read by the dispatcher,
// the simulator and `piccolo plan -o json`; they are immutable once published.
//
// The package also owns two rules every layer applies: a session's DAG
// (Session.Graph, SessionPlan.Graph, and LongestPath over it, for latencies
// under budgets, WCLs or estimates) and the batch dimension of a Tensor
// (Tensor.RowOffsets, Rows, CanBatch: which items may share a batch, and
// SplitRows). They are pure functions of their arguments, safe from any
// goroutine.
//
// Units: durations are time.Duration in Go and milliseconds (`_ms`) in plan JSON;
// rates are requests per second; prices are cost units per machine-hour, and cost is
// Σ machines × price with fractional machines charged by occupancy (paper §III-A).
package api
