// Package gateway is Piccolo's client-facing side: the KServe v2 (Open Inference
// Protocol) HTTP and gRPC servers, the DAG executor that runs a session's modules,
// and admission control. A session is exposed as a model, as a Triton ensemble is.
//
// # Request path
//
// A request arrives on the HTTP server (fasthttp; one goroutine per connection) or
// the gRPC server (one goroutine per call). It is decoded (DecodeInferRequest for
// JSON; raw_input_contents or typed contents for gRPC) into []api.Tensor and handed
// to DAGRunner.Infer on that goroutine, which blocks until the response is ready:
//
//  1. look up the session (ErrUnknownSession); when the runner knows its models'
//     tensors (MetadataSource), check the inputs against the source modules'
//     declared datatypes and shapes (ErrBadInput) before anything is queued;
//  2. admission: the deadline is arrival + the session's SLO (or the client's own
//     deadline if earlier); when the longest path through the DAG, with every module
//     costing what ModuleRunner.Estimate says (queue wait + batch duration), ends
//     after the deadline, the request is rejected at once with ErrOverloaded
//     instead of being queued to miss it;
//  3. run the DAG: each module starts when all its parents have resolved, by
//     calling ModuleRunner.Run, which returns at once and calls back from the
//     runner's goroutine; children of one module run concurrently;
//  4. answer with the sink modules' outputs and, as response parameters,
//     "piccolo.<module>.queue_ms", ".compute_ms", ".total_ms" and "piccolo.e2e_ms".
//
// Errors are values wrapping one sentinel (ErrBadInput, ErrUnknownSession,
// ErrTooLarge, ErrOverloaded, ErrDeadline, ErrUnavailable, ErrBackend), mapped once,
// at the edge, by HTTPStatus and GRPCCode.
//
// # DAG semantics
//
//   - Sources (modules without `after`) get the request's inputs.
//   - A module with one parent that ran gets that parent's outputs; with several,
//     the concatenation of their outputs in `after` order. A tensor name output by
//     two parents is kept from the first and renamed "<parent>.<name>" from later
//     ones (the same rule names the response's outputs when two sinks collide).
//   - Branch: a module with children that outputs a tensor named "branch"
//     (BranchOutput; INT32/INT64 child indexes in session order, or BYTES child
//     names) runs only the chosen children. A module runs when every parent has
//     resolved and at least one parent that ran chose it; otherwise it is skipped,
//     and a skip propagates the same way, so A→{B|C}→D runs D after whichever of B
//     and C ran. Skipped sinks contribute no outputs.
//   - Fan-out: a module with exactly one parent and a higher configured rate than
//     that parent (more items than requests: e.g. one recognition per detected box)
//     receives one item per element of dimension 0 of the parent's outputs (all of
//     which must agree on dimension 0), each shaped [1, rest...]; the items run
//     concurrently and their outputs are joined back on dimension 0 in item order
//     before its children or the response see them. Zero elements: the module is
//     skipped. A child with one parent that fans out and the same rate as it
//     fans out too (its items are the parent's elements again), so a chain such
//     as box → classify → recognize runs one item per box all along and is
//     batched per box; a lower rate (e.g. a per-request summary) gets the joined
//     tensors as one item.
//   - The first failure of any module fails the request once, with the module's
//     name; the request's context is then cancelled and later results ignored.
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
// same slack, so a module
// late on its budget costs latency, not an error, while the SLO allows. Items that cannot be stacked together
// go in separate calls, and a batch the backend rejects as invalid is retried item
// by item, so one bad request never fails another. Estimate (admission) is a
// lower bound: the module's shortest batch duration plus the time to drain the
// items in flight beyond the plan's expected count (capacity × WCL, Little's law).
//
// Place is the placement of static membership (no --consul): each group's
// ceil(machines) machines take the next backends of its hardware type from the
// config's list, round-robin; with fewer backends than machines, they share.
// With Consul membership the control loop places plans (scheduler/control.Place:
// fractional machines packed to occupancy ≤ 1, stable across re-plans) and Place
// leaves groups that already name backends as they are. A model is loaded on each backend (RepositoryModelLoad) with the largest
// batch and concurrency any group placed there needs.
//
// # Live config and the admin API
//
// A running gateway changes its plan without losing a request:
//
//   - ConfigStore holds the running *api.Config as an immutable, versioned
//     snapshot (Current is lock-free). Every change, from the admin API or the
//     file watcher, goes through Update, which serialises changes, validates
//     the new config, calls the store's OnConfig and publishes the new version
//     only if OnConfig succeeded; otherwise the running config stays as it was.
//   - LiveSwitch is the ModuleRunner of a gateway whose plan changes: Apply
//     places a plan, loads its models on the backends, builds a LiveRunner and
//     swaps it in with one atomic store. The previous runner stays open until
//     what was submitted to it has finished (and a request that started on it
//     can no longer reach it), then is closed; a module the new runner lacks (a
//     session just deleted) is served by the draining runner.
//   - EmbeddedControl.Apply is the default OnConfig (the scheduler inside the
//     gateway): re-plan with its Planner, refuse the change if a session that
//     planned before, or that the change adds or modifies, cannot be planned,
//     then LiveSwitch.Apply, DAGRunner.SetSessions and Metrics.SetPlan. The
//     control loop (scheduler/control) can replace it: any OnConfig that makes
//     the config live or fails without side effects will do.
//   - Admin (ServerOptions.Admin) serves /admin/ on the HTTP port behind a bearer
//     token compared in constant time: GET /admin/sessions, GET|PUT|DELETE
//     /admin/sessions/{name}, GET /admin/plan, GET /admin/backends. A PUT body
//     (one session, YAML or JSON with the config file's fields) is parsed and
//     validated by the config loader together with the rest of the running
//     config, so errors name the body's line and field. Status codes: 400 an
//     invalid change (the loader's problems listed), 401 no or wrong token (with
//     WWW-Authenticate: Bearer), 404 unknown session, 412 a stale If-Match, 422 a
//     change the planner or placement refused. Without an Admin, /admin/ answers
//     404 saying how to turn it on. AdminOptions.Backends lets the wiring back
//     GET /admin/backends with live membership (Consul); default: the static list.
//   - ConfigWatcher (StartConfigWatcher) watches the -c files' directories with
//     fsnotify (in-place writes and rename-replace saves), debounces bursts,
//     skips saves that change nothing, reloads every file and applies it with
//     cause "config"; an invalid edit is logged at warn and ignored. Admin
//     changes live in memory: the next file edit replaces the whole config.
//
// Request path cost of all this: LiveSwitch.Run and Estimate do one atomic load
// and one map lookup more than LiveRunner's; no lock, no allocation.
//
// # Metrics
//
// With ServerOptions.Metrics, GET /metrics on the HTTP port serves
// piccolo_gateway_requests_total{session,protocol,code} and
// piccolo_gateway_request_seconds{session}, plus whatever else is registered
// (`piccolo gateway` registers the LiveRunner: piccolo_dispatcher_* per module).
//
// # Concurrency
//
// DAGRunner's session table is an immutable snapshot swapped atomically by
// SetSessions. A request's run state is private to it; hand-overs between runner
// goroutines go through atomics. Tensors passed to Run belong to the runner from
// then on; the executor never writes to them.
package gateway
