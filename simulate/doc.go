// Package simulate is the discrete-event simulator behind `piccolo simulate`: it
// runs a plan's sessions with the real dispatcher (package dispatcher) on a
// dispatcher.VirtualClock, with virtual backends that finish each batch after its
// group's profiled duration (optionally jittered; drawn from a module's measured
// tail), and reports latency, throughput,
// goodput, SLO attainment, errors by kind and per-slot utilisation and cost.
//
// Load: each session's requests arrive per an arrival process (package arrival) at
// the session's rate, the rate of its source modules (Options.RatePerSec overrides
// it; module rates scale with it, the plan's machines and dummy rates do not).
// An MMPP or a trace (Options.MMPP, Options.Trace) drives one session
// (Options.Session, default the first planned) at its own mean rate; the other
// sessions then arrive as Poisson at their planned rates.
// A request visits the modules in DAG order; a module's items are submitted when
// all its parents are done. A module whose rate differs from its first parent's
// gets a deterministic share of the parent's items, Bresenham-style (rate 40 after
// 50: 4 items of every 5), or copies when its rate is higher (fan-out), so constant
// arrivals stay regular. A module's latency is its items' submission to completion;
// a session's is arrival to the completion of its last item. A request one of whose
// items fails is an error of that kind (deadline, ...) and its later modules do not run.
// Requests arriving within [0, Duration) are measured; arrivals go on, unmeasured,
// while those drain, so the last ones see the same load (no end-of-run partial
// batch waiting for its deadline flush).
//
// Options.Admission turns on the dispatcher's admission (dispatcher
// Options.Admission): an item predicted to complete after its module deadline
// is refused at Submit, and the request is counted as refused
// (SessionReport.Refused, AdmittedAttainment), not as an error. Options.Spare
// gives modules spare machines to overflow to (dispatcher.SetSpare). The
// simulated gateway is warm: FlushIdle's arrival-gap estimate starts from the
// simulated rate. Options.Changes switches the (unplaced) plan at given times,
// as the gateway's plan switch does (dispatcher.SetPlan on every module): a
// control loop's decisions, made beforehand from the arrivals, simulated
// (evaluation.Tuning). Options.PerSecond counts each session's requests by
// the second they arrived in (SessionReport.Seconds).
//
// PlanForBursts and PlanForTrace use the simulator to choose headroom: they plan
// with more and more of it until a simulation of the plan meets a target share
// of requests within the SLO, under Poisson arrivals or a trace (docs/traffic.md).
//
// The simulator is also the referee of the planner's latency model: simulate a plan
// under constant arrivals at its planned rates and compare each group's slowest
// item (GroupReport.MaxMs) with its WCL. What we measured is in the package README.
//
// A module with a measured tail (api.ModulePlan.Tail) runs each batch Factor
// times its duration with probability Share, drawn from its session's seeded
// source; a raced module (api.ModulePlan.Race = k) runs each batch on a
// racing set of k of its machines, all busy until the first of k draws ends
// (tail.go: moduleSender, racingSets).
//
// Run is single-threaded and deterministic for a given plan and Options; it may be
// called from several goroutines at once on different plans (nothing is shared).
// The per-request path allocates nothing in steady state: items, requests, batch
// completions and timers are pooled (see BenchmarkSimulate).
package simulate
