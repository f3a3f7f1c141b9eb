// Package loadgen is Piccolo's open-loop load generator: it sends KServe v2
// (Open Inference Protocol) inference requests to one session over HTTP or gRPC at
// the times an arrival process dictates, whatever the replies, and reports latency
// percentiles, throughput, goodput, SLO attainment and errors by kind.
//
// # Open loop
//
// Run draws the whole schedule from a seeded arrival.Process before it starts:
// request k is due at start + Σ gaps, so a slow reply never delays later sends.
// One scheduler goroutine (Run's own) sleeps until each due time and hands the
// request to a fresh goroutine. The process is constant, Poisson, gamma, an MMPP
// (bursts) or a recorded trace replayed (Options.Trace: its offsets are the due
// times; sends stop at its end or after Options.Duration, whichever is first). When the scheduler itself is behind (a loaded
// machine, a rate too high for one core) the request still goes out, but is counted
// in Report.LateSends and the worst lag in Report.MaxSendLagMs, so bunching is never
// silent. At most Options.MaxInflight requests are outstanding; a request due while
// the bound is reached is not sent and counts as the error kind
// "dropped: client overload" — the schedule never blocks.
//
// # Bounded stop
//
// Sends stop after Options.Duration. Run then waits up to Options.Drain for the
// outstanding replies; any still missing count as "timeout". Every request also has
// its own client timeout (Options.Timeout). Cancelling Run's context stops the
// schedule at once; outstanding requests count as "canceled".
//
// # Accounting
//
// Each request owns one preallocated result slot, written once with an atomic
// compare-and-swap, so the request path takes no lock and the drain can mark
// abandoned slots without racing late replies. After Run returns,
// Report.Sent == Report.OK + Σ Report.Errors exactly. Latency is measured from
// the moment the scheduler released the request to the reply, and percentiles are
// over successful requests only (Summarize, nearest-rank).
//
// # Inputs
//
// LoadInputs reads KServe v2 JSON request bodies (files, or every *.json, *.png
// and *.jpg in a directory) and image files (sent as a one-element BYTES tensor; over
// HTTP with Triton's binary-data extension). Without inputs Run asks the server for
// the model metadata and sends zeros of the declared shape with dimension 0 set to 1.
//
// # Goroutines
//
// Run is called from one goroutine and returns only after its scheduler has stopped.
// Replies that arrive after Run returned (abandoned at the drain) are discarded.
// Summarize, WriteTable, WriteJSON and WritePlot are pure functions of their input.
package loadgen
