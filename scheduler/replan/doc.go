// Package control is Piccolo's control plane on the scheduler side: it measures
// arrival rates, decides when to re-plan, and places a plan on the live backends.
// It imports no network code: inputs arrive through method calls, time through a
// Clock, so every decision runs on a fake clock in tests. The planner
// (package scheduler) stays a pure function; this package calls it.
//
// RateMonitor (monitor.go) — per (session, module) arrival rates, InferLine's
// traffic envelope measured at the session's own time scale. The rule:
//
//   - window = the session's SLO, floored at the time MinWindowArrivals (100)
//     arrivals take at its configured rate (NoRateWindow, 1 s, when the rate
//     is 0), rounded up to 100 ms buckets, at most the horizon
//     (EnvelopeWindow). The SLO is the time scale the session's queues must
//     absorb a burst in; the floor keeps one window's Poisson noise at ≤ 10 %,
//     half the 20 % up band, so a short SLO at a low rate does not re-plan on
//     noise (TestPoissonEnvelope: envelope 1.2–1.3× the mean of steady
//     Poisson traffic with the floor, 3.5× at 20 req/s over 100 ms without).
//   - current = the rate over the latest window; envelope = the highest
//     window rate, sliding a bucket at a time, within the last DefaultHorizon
//     (30 s, MonitorOptions.Horizon); mean = the rate over the horizon.
//
// The controller re-plans up when the current rate leaves the band, down when
// the envelope does, and plans for the envelope: for the peak load an SLO
// window saw in the last 30 s, not the mean. The gateway resolves a *Counter
// per module once, when it loads a plan (Handle, with the window), and calls
// Counter.Add(1) per request: one atomic load and one atomic add, no lock, no
// allocation (BenchmarkCounterAdd). Someone must advance the monitor's time at
// least once per bucket (Run, or Advance from a ticker); Snapshot(now) returns
// the rates, a JSON-ready value a gateway can send to a remote scheduler.
// Every method is safe from any goroutine.
//
// Placement is package placement's Place (Options.Place; default: packed),
// which the controller calls on every decision with its members, the plan
// it placed last and the co-location slowdowns learned so far.
//
// Controller (controller.go) — the control loop. New(cfg, members, Options{Plan,
// Publish}) then Run(ctx) from one goroutine (or, on a virtual clock, Step(now)
// per tick from one goroutine instead of Run); from any goroutine, SetConfig
// (cause "config"), SetMembers (cause "membership": re-place the last plan, or
// re-plan when a hardware type appeared or vanished), ObserveRates(source,
// snapshot) (cause "rate": the latest window's rate above planned×(1+0.2),
// and the rate over the latest 4 windows 4 standard deviations of a Poisson
// count above it, for 3 s, or the envelope below planned×(1−0.3) for 30 s — about a minute after a
// fall, with the horizon; the new plan uses the measured envelopes), Replan
// (cause "manual"), every Period (cause "periodic"), and, with
// Options.Calibration, when the calibrated durations of the plan's groups
// stay more than DriftThreshold (10%) from the plan's for DriftHold (3 s)
// (cause "drift"; plans are then made from the calibrated profiles,
// docs/calibration.md), and when two models the placement packs on one
// device slow each other beyond DriftThreshold for DriftHold (cause
// "colocation": the learned slowdowns go to every placement as
// placement.Options.Slowdowns, so the pair is kept apart). A rate rise whose plan the pool cannot hold while
// the current plan fits is not published (admission refuses the excess).
// Each decision runs the injected planner once (serving.Plan, which fits the
// plan to the members it is handed as the config's backends; the planner is
// not run again here), places the result on the members
// and calls its Target's Publish with a *Replan (placed plan, cause,
// shortfall, the rates planned for, how long planning and placement took). A
// plan identical to the published one is not published again. Status()
// returns the last decision and counts for the admin API.
//
// Wiring (embedded re-planner inside the gateway):
//
//	mon, _ := replan.NewRateMonitor(time.Now(), replan.MonitorOptions{})
//	go mon.Run(ctx, replan.SystemClock{})        // advances the buckets
//	// per module, when a plan is loaded (controlplane/arrivals.go):
//	//   c := mon.Handle(session, module, replan.EnvelopeWindow(slo, configuredRate))
//	//   (a fan-out module: mon.HandleFanOut(session, module, window, parentRate))
//	// per request (a source): c.Add(1); per start of another module: c.AddItems(items)
//	ctl, _ := replan.New(cfg, members, replan.Options{
//		Plan:    func(c *api.Config) (*api.Plan, error) { return planner.Plan(c, opts) },
//		Target: replan.Publisher(func(r *replan.Replan) error { /* build LiveRunner from r.Plan, swap, metrics.SetPlan(r.Plan, r.Cause, r.PlanTook+r.PlaceTook) */ }),
//	})
//	go ctl.Run(ctx)
//	// every second: ctl.ObserveRates("gateway-1", mon.Snapshot(time.Now()))
//	// on a membership event: ctl.SetMembers(converted members)
//	// on a valid config change: ctl.SetConfig(cfg)
//
// controlplane.EmbeddedControl is this wiring (a gateway without Consul, its
// static backends as members, Tick 100 ms and SustainUp 500 ms); its Target's
// Place and Failed keep round-robin sharing on a short static pool and
// answer a waiting config change when its decision failed.
//
// With several gateways (scheduler/cluster), each writes its Snapshot (JSON)
// to Consul KV; the elected re-planner reads them and calls ObserveRates with
// the gateway's id; rates add up.
// Members convert from the membership package as placement.Member{ID, Hardware}; a
// static config's backends as placement.Member{b.ID, b.Hardware}.
//
// Fan-out distributions (fanout.go) — a fan-out module's counter also counts
// each parent item by the items it brought, in two generations of the horizon
// (or of the time 1,000 parent items take at its parent's configured rate, at
// most 10 minutes); snapshots carry the counts (ModuleRate.FanOut); from
// MinFanOutSamples parent items on, the controller plans the module with the
// measured distribution when its 99.9th percentile needs another number of
// batches of the module's largest planned batch than the one in use (cause
// "fanout"; a config changing the module's fanout drops it).
//
// Tuner (tuner.go) — InferLine's Tuner (§5, Algorithms 3–4): a pure decision
// over 100 ms bucket counts (Observe, then Check, from one goroutine) that
// scales one session's modules' machines when the live envelope exceeds the
// planning trace's at any window from the SLO to 60 s, and back after 15 s;
// Tuned gives the scaled plan, which Controller.Tune places and publishes
// without a planner run (cause "tune"). Options.Hold hands such modules' rate
// band to the Tuner; Options.Covers says what rates a plan carries (a trace
// plan: its trace's envelope). Counter.Closed reads a monitor counter's closed
// buckets for it. CoarseTuner (coarse_tuner.go) is coarse-grained tuning, the
// baseline InferLine measures its Tuner against (§7, after AutoScale): the
// same contract (the Tuning interface), whole-pipeline replicas scaled
// together on the last 5 s's rate; NewScopedTuner picks one by scope
// (TunerScopes: module, pipeline).
package replan
