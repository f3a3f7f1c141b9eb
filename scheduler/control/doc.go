// Package control is Piccolo's control plane on the scheduler side: it measures
// arrival rates, decides when to re-plan, and places a plan on the live backends.
// It imports no network code: inputs arrive through method calls, time through a
// Clock, so every decision runs on a fake clock in tests. The planner
// (package scheduler) stays a pure function; this package calls it.
//
// RateMonitor (monitor.go) — per (session, module) arrival rates over sliding
// windows, InferLine's traffic envelope: the highest rate over several windows
// (default 1 s, 5 s, 30 s), so a burst shows at once and a sustained rate after
// the long window. The gateway resolves a *Counter per module once, when it loads
// a plan (Handle), and calls Counter.Add(1) per request: one atomic load and one
// atomic add, no lock, no allocation (BenchmarkCounterAdd). Someone must advance
// the monitor's time at least once per bucket (Run, or Advance from a ticker);
// Snapshot(now) returns the rates, a JSON-ready value a gateway can send to a
// remote scheduler. Every method is safe from any goroutine.
//
// Place (placement.go) — a pure function: plan + the live members ({ID,
// Hardware}) + the previous placed plan → the placed plan (one backend id per
// machine in GroupPlan.Backends, the form gateway.NewLiveRunner and the
// dispatcher accept) and a Shortfall (devices needed vs present per hardware
// type, idle devices, under-provisioned groups). Full machines get a device of
// their own; fractional machines of different modules share devices, first-fit
// decreasing, never beyond occupancy 1. Stable: modules stay where they ran.
package control
