// Package serving decides which plan is served: given the config (its
// sessions at the rates to plan for, and its backends, the pool: device
// counts per hardware type), the traffic model (Poisson bursts, or a
// trace) and the calibrated profiles (the config's, as the re-planner hands
// them), Plan returns the plan a gateway serves. Every caller asks it and
// nothing else: the gateway's config pipeline (controlplane.Pipeline: fuse,
// plan, check) and its control loop (config, membership, rate and drift
// re-plans: replan.Options.Plan), the cluster's re-planner (`piccolo
// scheduler`), `piccolo plan` (Served: the same answer as a gateway started
// on the same files, TestPlanIsServed), `piccolo demo` and the evaluation's
// serving rule (DefaultHeadroom, `piccolo bench paper/footing`).
//
// What it owns:
//
//   - Headroom (Plan): the burst check, simulate.PlanForBursts at the
//     burst target (DefaultBurstTarget, --burst-target), its simulation
//     bounded by items (simulate.BurstItems), so planning time does not grow
//     with the rate (docs/traffic.md, "Planning time and the rate").
//   - The pool: the planner takes the device counts per hardware type
//     (planner.Options.Pool) and splits a module across types itself;
//     the most headroom that fits; headroom from a pool that binds
//     (poolHeadroom); and a plan the pool still cannot hold fitted to the
//     rate the pool carries (fitRate), so no plan of 61 machines on a pool
//     of one is served. Nothing re-runs the planner with profiles removed.
//   - The fuse and check steps (Fuse, Check), and the planners for
//     recorded arrivals and written plans (TracePlanner, `gateway --trace`;
//     FilePlanner, `gateway --plan`).
//
// Every function here is pure (config in, plan out) and safe from any
// goroutine; TracePlanner and FilePlanner are immutable after their
// constructors. The planner's runs are counted at the planner
// (planner.Runs): TestPlannerRunsPerChange reports them per admin
// change, member join and drift re-plan.
package serving
