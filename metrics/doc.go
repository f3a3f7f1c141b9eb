// Package metrics holds the gateway's Prometheus metrics: the request
// counters and latency histograms kserve records, the module queue, compute
// and batch-size histograms dataplane records, the plan and membership gauges
// the control plane sets, and the descriptors of the dispatchers' counters that
// dataplane.LiveRunner collects at scrape time.
//
// Every metric name is an exported constant (names.go); readers such as
// package status use those constants, never copies of the strings. Adding a
// metric: its name constant in names.go, its collector in NewMetrics (or a
// Desc for scrape-time collection), a setter for whoever records it, and a
// line in docs/observability.md.
//
// Who calls what: NewMetrics once per process (it registers on the given
// registry and serves it at Handler); Observe and ModuleMetrics.Item/Batch on
// the request path (atomic adds on children resolved up front, no lock, no
// allocation); SetPlan, SetMembership, SetMembershipStale, SetPlanSource and
// SetDAGRunner from the control plane, any goroutine. A nil *Metrics and a nil
// *ModuleMetrics record nothing.
package metrics
