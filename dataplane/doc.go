// Package dataplane is the gateway's data plane: the ModuleRunner that batches
// each module's items with a dispatcher and runs the batches on backends, and
// the switch that changes its plan live.
//
// Who calls what: gateway.DAGRunner calls Run and Estimate (the request path,
// any goroutine), and Abandon when a request returns without its result (its
// items still queued are taken out: dispatcher.Sweep); the control plane (package controlplane) calls
// NewLiveSwitch once and LiveSwitch.Apply for each new plan, from one
// goroutine at a time; Prometheus calls Collect at scrape time. It imports
// gateway (ModuleRunner, Timing, the sentinel errors), dispatcher, backends
// and metrics; never kserve or controlplane.
//
// # Live runner and placement
//
// LiveRunner is the ModuleRunner of `piccolo gateway`: one dispatcher (package
// dispatcher, TC or RR) per module, built from the plan's ModulePlan, whose Sender
// runs each batch on its slot's backend with the backend client (one goroutine per
// batch; the call is bounded by the latest end-to-end deadline of its items).
// An item's dispatch deadline is min(now + module budget, request deadline) less
// LiveOptions.SlackFraction of the budget; it times the flush of a partial batch.
// Its expiry, when it is failed instead of sent, is the later of that and the
// request deadline less the shortest time the rest of the DAG needs and the
// same slack, so a module late on its budget costs latency, not an error, while
// the SLO allows. Items that cannot be stacked together go in separate calls,
// and a batch the backend rejects as invalid is retried item by item, so one
// bad request never fails another. Estimate (admission) is a
// lower bound: the module's shortest batch duration plus the time to drain the
// items in flight beyond the plan's expected count (capacity × WCL, Little's law).
//
// There is one placement, package placement's Place; a LiveSwitch places with
// Options.Static on its config's backends (placement.Members), which packs as the control
// loop does (fractional machines of different modules share a device up to
// occupancy 1; a LiveSwitch passes the placed plan it replaces, so modules stay
// where their models are loaded) when the list holds the devices the plan
// needs, and otherwise gives each group's ceil(machines) machines the next
// backends of its hardware type, round-robin, sharing when the list is short.
// The control loop (embedded or the cluster's) hands over plans it placed
// already; static placement leaves groups that name backends as they are. A model is loaded on
// each backend (RepositoryModelLoad) with the largest batch and concurrency any
// group placed there needs.
//
// # Spare machines
//
// With LiveOptions.Spare (`piccolo gateway --spare`, default on), each module
// is given, as spare machines (dispatcher.SetSpare), the backends of the pool
// (cfg.Backends: the static list, or the members a Consul plan was made
// with) that the placed plan leaves idle and whose hardware has a profile
// for the module's model; its batches overflow there when its planned
// machines are saturated, before admission refuses (spare.go gives the
// profile entry chosen). The models are loaded on the spare backends when the
// plan is applied, not at the first overflow: a load takes seconds, and a
// spare that cannot be loaded is logged and left out without failing the
// plan. One idle backend may be spare for several modules; each counts its
// lanes as its own. Spare slots have Group −1: code indexing by group skips
// them (Stats.Spare holds their counters).
//
// LiveSwitch is the ModuleRunner of a gateway whose plan changes: Apply
// places a plan, loads its models on the backends, builds a LiveRunner and
// swaps it in with one atomic store, then hands each module's items the
// previous runner has not sent to the new runner's dispatcher of the same
// module and model (dispatcher.Handover), so that admission there counts
// them (their callbacks stay the previous runner's). The previous runner
// stays open until what was submitted to it has finished (and a request that
// started on it can no longer reach it), then is closed; a module the new
// runner lacks (a session just deleted) is served by the draining runner.
// Make-before-break: the new plan's models are loaded, and warmed where the
// executor warms up, before the swap; a backend asked for a model it already
// has with the same settings keeps it, and one reloaded with new settings or
// unloaded (after the drain, when no runner uses it) is closed on the backend
// only once its last batch returns (backends.Server counts them), so no batch
// in flight or fused chain between steps meets a closed model. A health
// re-placement that would place the plan as it runs changes nothing.
//
// Request path cost of the switch: LiveSwitch.Run and Estimate do one atomic
// load and one map lookup more than LiveRunner's; no lock, no allocation.
//
// # Faults: retry, ejection, re-placement, stragglers, hedging
//
// Health (health.go) is the backends' health, one per LiveSwitch, shared by
// its runners and read by their dispatchers as their dispatcher.HealthTable.
// The sender (resend.go) retries a batch whose call failed in a way another
// machine may not (refused, cut, UNAVAILABLE, model not loaded, INTERNAL,
// malformed) on another machine of the module (Dispatcher.Alternate), at most
// three calls, while the items' latest deadline allows; a failure at the
// transport first ejects the backend (an atomic flag the dispatchers read,
// and Dispatcher.Reroute for its queued batches), which is then probed with
// backoff (backends.Client.Probe) and, once it passes, has its models loaded
// again. Each call's measured/profiled duration feeds a per-backend EWMA: from
// 1.5 the backend is a straggler, down-weighted by the dispatcher. With
// calibration on, each full batch's compute time over its offline profile
// also sets the backend's pace (Health.paced: second largest of the latest
// 4; a backend not measured yet takes the measured ones' lower median),
// which the dispatchers read as dispatcher.MachineHealth.Pace
// (docs/calibration.md, "Admission before calibration"). Before a runner
// takes traffic, each backend it sends batches to whose pace is not measured
// yet and that the running plan does not use gets a warm-up batch of its
// config with dummy inputs (warmup.go, on newLiveRunner's goroutine,
// concurrent across backends, at most 5 s; a round that looks slow is run
// again alone on its host), which sets its first pace sample; a failure is
// logged once per model and fails nothing. A batch
// still running at twice its profiled duration is hedged to another machine
// within LiveOptions.HedgeBudget; the first answer wins, the other call is
// cancelled, and the batch completes once both have returned. A raced module
// (api.ModulePlan.Race = k, Cloudflow's competitive execution) is not hedged:
// every batch runs at once on its machine and up to k−1 others, the first
// answer taken and the other calls cancelled (raceAttempt, resend.go). The static mode
// (LiveSwitch.ReplaceOnEjection, called by controlplane.StartEmbedded) also
// probes every used backend each ProbeInterval and re-places the plan on the
// backends that are up, stragglers last (replace.go). docs/faults.md has the
// rules and the measured figures. Request path cost: two atomic loads per
// dispatch, and, on a module with two backends or more and hedging on, a
// timer, a channel and a goroutine per batch (none per request).
//
// # Errors
//
// A backend's or dispatcher's failure is mapped once, here (mapBackendError),
// to the gateway's sentinels: a deadline to gateway.ErrDeadline, an input the
// backend calls invalid to gateway.ErrBadInput, a backend unreachable,
// overloaded, closed or without the model (and a closed dispatcher) to
// gateway.ErrUnavailable, anything else to gateway.ErrBackend.
//
// # Metrics
//
// LiveOptions.Metrics records each item's queue and compute time and each
// batch's size (metrics.ModuleMetrics, resolved when the runner is built);
// LiveRunner and LiveSwitch are prometheus.Collectors of the dispatchers'
// counters (the piccolo_dispatcher_* names of package metrics) and of
// Health's (piccolo_gateway_backend_*, retries, hedges), read at scrape time
// so the request path pays nothing for them.
package dataplane
