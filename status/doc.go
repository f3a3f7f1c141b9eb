// Package status is `piccolo status`: it reads a running gateway's /metrics
// (and, with the admin token, /admin/plan and /admin/backends) and prints the
// plan, the backends, each session's SLO attainment and latency, and each
// module's planned against measured figures.
//
// Run scrapes once, or twice Options.Window apart for figures over a window;
// latency percentiles come from histogram buckets ("≤256ms": the bucket holding
// the percentile ends at 256 ms). Metric names come from package metrics'
// constants. Live (live.go) computes the same figures as values between two
// Samples of a registry: the gateway's live view (controlplane/view.go) runs
// it on its own registry, off the request path; the rest is a client only.
package status
