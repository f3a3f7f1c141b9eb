// Package controlplane makes a gateway's config and plan live: the versioned
// config store, the file watcher, the admin API and the two Control
// implementations (embedded re-planner, Consul cluster).
//
// Who calls what: the gateway process (package gateway/process, `piccolo
// gateway`) loads the config, picks the plan step and the calibration, and
// calls StartGateway (start.go), which starts the Control its options pick,
// builds the DAGRunner and the ConfigStore over it and attaches them
// (Control's doc gives the order); the process then builds the admin API
// (NewAdmin), the file watcher (StartConfigWatcher) and the KServe servers
// over the DAGRunner, and drains at the end. (`piccolo scheduler`, a
// standalone scheduler/cluster.Replanner candidate, is scheduler/process.)
// Every change, from the admin API or the watcher, goes through
// ConfigStore.Update, one at a time. The request path never enters this
// package. It imports dataplane, gateway, metrics, serving, planner, scheduler/replan and
// scheduler/cluster; neither kserve nor gateway/process's servers are its
// concern (the HTTP server takes the admin API as a plain fasthttp handler).
//
// # Live config
//
// A running gateway changes its plan without losing a request:
//
//   - ConfigStore holds the running *api.Config as an immutable, versioned
//     snapshot (Current is lock-free). Every change, from the admin API or the
//     file watcher, goes through Update, which serialises changes, validates
//     the new config, calls the store's OnConfig and publishes the new version
//     only if OnConfig succeeded; otherwise the running config stays as it was.
//   - Control makes changes live; its Apply is the store's OnConfig.
//     EmbeddedControl (the re-planner inside the gateway; StartEmbedded runs
//     the control loop, scheduler/replan.Controller, with the config's static
//     backends as members and returns once its first plan is live): the
//     request path's arrival counters feed ObserveRates every 100 ms, so a
//     sustained rise re-plans onto idle backends and a fall releases them;
//     each decision goes live through dataplane.LiveSwitch.Apply,
//     DAGRunner.SetSessions and Metrics.SetPlan. A change goes through the
//     config Pipeline (pipeline.go): fused, planned once at the controller's
//     rates, and refused if a session that planned before, or that the change
//     adds or modifies, cannot be planned (Check); else the checked plan is
//     handed to Controller.SetPlanned, which places and applies it without
//     planning again. Apply returns once it is live. The DAGRunner's
//     ModuleArrivalObserver (arrivals.go) counts each session's requests at
//     its sources and the items reaching every other module, for the rate
//     monitor; cluster.ExpandRates gives the controller each module's own
//     measured rate. ConsulControl (--consul; StartConsulControl) follows the
//     plan the cluster's elected re-planner publishes in Consul KV, runs a
//     re-planner candidate unless told not to, reports the measured rates, and
//     makes an operator's change live by fusing, planning and checking it here
//     (the same Pipeline and Check), storing it with its checked plan in one
//     check-and-set transaction (the leader places that plan instead of
//     planning the change again) and waiting until a plan for it is live.
//   - Admin (its Handle is kserve.ServerOptions.Admin) serves /admin/ on the
//     HTTP port behind bearer tokens compared in constant time: GET /admin/sessions, GET|PUT|DELETE
//     /admin/sessions/{name}, GET /admin/plan, GET /admin/backends. A PUT body
//     (one session, YAML or JSON with the config file's fields) is parsed and
//     validated by the config loader together with the rest of the running
//     config, so errors name the body's line and field. Status codes: 400 an
//     invalid change (the loader's problems listed), 401 no or wrong token (with
//     WWW-Authenticate: Bearer), 404 unknown session, 412 a stale If-Match, 422 a
//     change the planner or placement refused. Without an Admin, /admin/ answers
//     404 saying how to turn it on. AdminOptions.Backends lets the wiring back
//     GET /admin/backends with live membership (Consul); default: the static list.
//     A query parameter the call does not take is refused (400, naming it and
//     the allowed ones). Dry runs (PUT or DELETE ?dry_run=true, POST
//     /admin/sessions/{name}:plan; dryrun.go) run the change through
//     EmbeddedControl.DryRun, the pipeline's fuse, plan and check steps
//     without the controller, and answer a PlanDiff. The ConfigStore keeps the
//     last HistoryLen versions (history.go: who, when, a YAML diff, the plan's
//     cost): GET /admin/history, POST /admin/sessions/{name}:rollback?to=V;
//     with --consul (AdminOptions.History = ConsulControl.History) the
//     cluster's history, kept in Consul KV and written by ConsulControl.Apply
//     in the config's own transaction (cluster_history.go). Who made a change
//     is the name of the admin token it came with (AdminOptions.Token is
//     "admin"; Tokens, named, from --admin-tokens FILE: tokens.go).
//     The live view (view.go): a page under /admin/view/ (embedded files,
//     served without the token: they hold no data) that polls GET
//     /admin/view/state (token required), status.Live's figures over the
//     last minute from AdminOptions.Gatherer, sampled by a goroutine that
//     Admin.Close stops.
//   - ConfigWatcher (StartConfigWatcher) watches the -c files' directories with
//     fsnotify (in-place writes and rename-replace saves), debounces bursts,
//     skips saves that change nothing, reloads every file and applies it with
//     cause "config"; an invalid edit is logged at warn and ignored. Admin
//     changes live in memory: the next file edit replaces the whole config,
//     unless the file defining a session the admin API changed since the last
//     reload was written before that change: then the reload is refused
//     (ConfigStore.fileGuard; piccolo_config_file_overwrites_refused_total).
//
// # Planning for serving
//
// Which plan is served is package serving's: serving.Plan (headroom, the
// pool, fitting to it), serving.Fuse, serving.Check, and its TracePlanner
// and FilePlanner. The gateway process picks the plan step the flags ask for
// (gateway/process); this package runs the config route through it
// (Pipeline). Both planners
// are immutable after their
// constructor and safe from any goroutine. EmbeddedControl.StartTuner
// (tuning.go, `--tune`) runs replan.Tuner (or, with the trace planner's
// Scope pipeline, `--tune-scope pipeline`, replan.CoarseTuner on the
// coarse-grained plan) in its own goroutine, reading the
// rate monitor's buckets and calling Controller.Tune (docs/traffic.md).
package controlplane
