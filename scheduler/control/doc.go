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
// machine in GroupPlan.Backends, the form dataplane.NewLiveRunner and the
// dispatcher accept) and a Shortfall (devices needed vs present per hardware
// type, idle devices, under-provisioned groups). Full machines get a device of
// their own; fractional machines of different modules share devices, first-fit
// decreasing, never beyond occupancy 1. Stable: modules stay where they ran.
//
// Controller (controller.go) — the control loop. New(cfg, members, Options{Plan,
// Publish}) then Run(ctx) from one goroutine; from any goroutine, SetConfig
// (cause "config"), SetMembers (cause "membership": re-place the last plan, or
// re-plan when a hardware type appeared or vanished), ObserveRates(source,
// snapshot) (cause "rate": the 1 s rate above planned×(1+0.2) for 3 s, or the
// envelope below planned×(1−0.3) for 30 s; the new plan uses the measured
// envelopes), Replan (cause "manual"), and every Period (cause "periodic").
// Each decision runs the injected planner, places the result on the members
// and calls the injected Publish with a *Replan (placed plan, cause,
// shortfall, the rates planned for, how long planning and placement took). A
// plan identical to the published one is not published again. Status()
// returns the last decision and counts for the admin API.
//
// Wiring (embedded scheduler inside the gateway):
//
//	mon, _ := control.NewRateMonitor(time.Now(), control.MonitorOptions{})
//	go mon.Run(ctx, control.SystemClock{})        // advances the buckets
//	// per module, when a plan is loaded:  c := mon.Handle(session, module)
//	// per request:                        c.Add(1)
//	ctl, _ := control.New(cfg, members, control.Options{
//		Plan:    func(c *api.Config) (*api.Plan, error) { return scheduler.Plan(c, opts) },
//		Publish: func(r *control.Replan) error { /* build LiveRunner from r.Plan, swap, metrics.SetPlan(r.Plan, r.Cause, r.PlanTook+r.PlaceTook) */ },
//	})
//	go ctl.Run(ctx)
//	// every second: ctl.ObserveRates("gateway-1", mon.Snapshot(time.Now()))
//	// on a membership event: ctl.SetMembers(converted members)
//	// on a valid config change: ctl.SetConfig(cfg)
//
// controlplane.EmbeddedControl is this wiring (a gateway without Consul, its
// static backends as members, Tick 100 ms and SustainUp 500 ms); Options.Place
// and Options.Failed let it keep round-robin sharing on a short static pool
// and answer a waiting config change when its decision failed.
//
// With several gateways (scheduler/cluster), each writes its Snapshot (JSON)
// to Consul KV; the elected scheduler reads them and calls ObserveRates with
// the gateway's id; rates add up.
// Members convert from the membership package as Member{ID, Hardware}; a
// static config's backends as Member{b.ID, b.Hardware}.
package control
