package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	gatewayprocess "github.com/piccolo-serving/piccolo/gateway/process"
	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
	"github.com/piccolo-serving/piccolo/simulate"
)

// gatewayOptions are the flags of `piccolo gateway`.
type gatewayOptions struct {
	tracing                 tracingFlags
	noFuse                  bool // --no-fusion: serve the modules as configured (docs/fusion.md)
	files                   []string
	listen                  string
	grpcListen              string
	policy                  string
	maxUtil                 float64
	sessionUtil             map[string]string
	burst                   float64
	dispatch                string
	flush                   string
	maxBody                 int
	door                    bool // --overload-control
	doorOpts                kserve.OverloadOptions
	maxInflight             int64
	headerTimeout           time.Duration
	maxConnsPerIP           int
	adminListen             string
	tenants                 string
	consulAuth              membership.ConsulAuth
	backendTLSMode          string
	backendToken            string
	slack                   float64
	invocationSlack         bool
	lateCommit              bool
	locality                int
	admission               bool
	hedge                   float64       // --hedge-budget
	probeEvery              time.Duration // --probe-interval
	spare                   bool
	calibrate               bool   // --calibration
	calFile                 string // --calibration-file
	logFmt                  string
	drain                   time.Duration
	drainDelay              time.Duration // on shutdown, serve this long while reporting not ready, then drain
	adminToken              string
	adminTokens             string // --admin-tokens FILE
	watch                   bool
	consul                  string   // Consul agent HTTP address; "": membership from the config (controlplane/cluster.go)
	tls                     tlsFlags // HTTPS and gRPC TLS to clients
	backendCA               string   // --backend-ca: the CA of the backends that serve TLS
	backendCert, backendKey string   // --backend-cert, --backend-key: the gateway's client certificate towards them

	// With --consul (controlplane/cluster.go, scheduler/cluster).
	clusterPrefix string        // KV prefix of the cluster
	schedule      bool          // run a scheduler candidate in this gateway
	schedulerID   string        // the candidate's id (default gateway-<gateway id>)
	schedulerTTL  time.Duration // the candidate's heartbeat TTL
	gatewayID     string        // this gateway's id in Consul (rates key)
	configWait    time.Duration // how long an admin change waits for its plan

	// --trace and its flags, --plan: what the plan step plans for (gateway_trace.go).
	trace      simulate.Traffic
	planFile   string
	traceFlags *pflag.FlagSet // the command's flags, for which --trace flags were given; nil in tests
	tune       bool           // --tune: InferLine's tuner on the traced session
	tuneScope  string         // --tune-scope: module or pipeline

	// Tests only: the control loop's options (Plan, Target are set by the
	// wiring) and a hook called with every plan made live.
	loop    replan.Options
	monitor replan.MonitorOptions
	onPlan  func(controlplane.PlanEvent)
}

func newGatewayCmd() *cobra.Command {
	o := &gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway -c FILE... [--listen ADDR] [--grpc-listen ADDR]",
		Short: "Serve sessions as KServe v2 models over HTTP and gRPC, batching onto the backends",
		Long: `gateway loads the config (hardware, profiles, sessions and the static backends
list), plans every session with the scheduler (--policy), places the plan on the
backends (fractional machines of different modules share a backend, as the
plan's cost assumes; round-robin when the list is too short), loads the models there with the plan's batch size and
concurrency, and serves each session as a KServe v2 model:

  HTTP (fasthttp, --listen):  GET /v2, /v2/health/live, /v2/health/ready,
                              /v2/models/{session}, /v2/models/{session}/ready;
                              POST /v2/models/{session}/infer (JSON, or the binary
                              tensor data extension: docs/protocol.md)
  gRPC (--grpc-listen):       inference.GRPCInferenceService, grpc.health.v1.Health,
                              server reflection (grpcurl -plaintext ADDR list)
  Prometheus text:            GET /metrics on the HTTP port

A request runs the session's DAG; each module's items are batched and dispatched
by --dispatch (tc: the paper's throughput-cost dispatch; rr: round-robin). By default
(--flush idle) a partial batch also goes as soon as a machine of its group is idle
while the measured arrival rate leaves capacity for batches that small, so at low
load a request takes about its compute time; --flush deadline is the paper's rule
(only at the latest time the batch's oldest item allows), under which a request at
low load takes nearly its whole SLO. A request
whose deadline (arrival + SLO) cannot be met given the current queues is rejected
at once (HTTP 429, gRPC RESOURCE_EXHAUSTED). Responses carry per-module queue,
compute and total milliseconds as parameters "piccolo.<module>.queue_ms" etc.

Admin API, on the admin listener (--admin-listen, with /metrics and
/debug/pprof/; the client port answers 404 for them; docs/security.md), only
with --admin-token or PICCOLO_ADMIN_TOKEN (named "admin") and/or --admin-tokens
FILE (named tokens); every request must send "Authorization: Bearer <token>",
else 401; the config history records each change by its token's name:
  GET /admin/sessions, GET|PUT|DELETE /admin/sessions/{name},
  PUT /admin/sessions/{name}?dry_run=true, POST /admin/sessions/{name}:plan,
  GET /admin/history, POST /admin/sessions/{name}:rollback?to=VERSION,
  GET /admin/plan, GET /admin/backends          (docs/control-plane.md, docs/operations.md)
A session PUT or DELETE is validated with the rest of the running config,
re-planned and swapped in live; an invalid or unplannable change is refused
(400/422) and nothing changes. With --watch (default) the -c files are
reloaded when they change; an invalid edit is logged and the running config
stays. Admin changes are not written to the files; a reload from a file
written before an admin change it would overwrite is refused and logged.

With --consul ADDR (or membership: consul, which needs the flag) the backends
come from Consul (service piccolo-backend, registered by piccolo backend
--consul) and the gateway joins a cluster whose plan lives in Consul KV under
--cluster-prefix: it serves the plan the cluster's scheduler publishes, swapping
each new one in live, and reports its measured rates there. Unless
--schedule=false it is also a scheduler candidate: one candidate in the cluster
(gateways, or standalone piccolo scheduler processes) is elected with a Consul
lock and re-plans and re-places on a membership change, a sustained rate
change, a config change and periodically; a standby takes over when it dies.
The cluster's config lives in Consul too: the first scheduler seeds it from its
-c files, and an admin-API change or an edited -c file on any gateway is
planned there, stored with check-and-set and answered once its plan is live.
When Consul is unreachable the gateway keeps serving the last plan and members
it saw (metric piccolo_membership_stale 1).

Without --consul the gateway re-plans by itself over its backends list: a rate
that stays 20% above the plan for 0.5 s is re-planned onto the idle backends
(live within about a second); a fall below 70% of the plan releases them about
a minute later (every rate window must have fallen, then 30 s more).

--trace FILE plans for recorded arrivals as piccolo plan --trace does (with the
gateway's --flush; --duration, --speed, --skip, --attainment, --trace-search,
--trace-session as there) and serves that plan; a rate re-plan plans for the trace
scaled to the measured envelope, so it keeps the burst provisioning. --plan FILE
serves a plan JSON written by piccolo plan --no-fusion -o json, checked against the
config (docs/traffic.md, "Serving a trace plan").

Sessions the scheduler cannot plan are still listed and answer 503 with the reason.
The servers open once the plan is live and the backends' models are loaded;
from then /v2/health/ready answers 200 and gRPC health SERVING. On SIGINT or
SIGTERM the gateway reports not ready (503, NOT_SERVING), keeps serving for
--drain-delay so that load balancers and probes take it out, then stops
accepting, finishes requests in flight (up to --drain) and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runGateway(ctx, o, func(httpAddr, grpcAddr string) {
				fmt.Fprintf(cmd.OutOrStdout(), "piccolo gateway: HTTP on %s, gRPC on %s\n", httpAddr, grpcAddr)
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "config", "c", nil, "config file (repeatable; files are merged)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8000", "HTTP listen address host:port (port 0: any free port)")
	f.StringVar(&o.grpcListen, "grpc-listen", "127.0.0.1:8001", "gRPC listen address host:port (must differ from --listen)")
	f.StringVar(&o.policy, "policy", "piccolo", "planning policy: "+strings.Join(planner.Policies, ", "))
	f.Float64Var(&o.maxUtil, "max-utilization", 0, "plan machines to run at most this share of their throughput, in (0,1] (0: choose it by simulation, see --burst-target)")
	f.StringToStringVar(&o.sessionUtil, "session-utilization", nil, "with --max-utilization, SESSION=U plans that session at cap U in (0,1] instead (repeatable or comma-separated), as the burst check chooses per session ('piccolo plan' prints them)")
	f.Float64Var(&o.burst, "burst-target", serving.DefaultBurstTarget, "with --max-utilization 0: the share of simulated Poisson requests that must meet the SLO; the planner lowers utilisation until they do")
	f.StringVar(&o.dispatch, "dispatch", "tc", "dispatch policy: "+dispatcher.Policies)
	f.StringVar(&o.flush, "flush", dispatcher.FlushIdle.Name(), "when a partial batch goes: idle (also as soon as a machine of its group is idle, while the measured arrival rate leaves capacity for batches that small) or deadline (the paper's §III-B: only at the latest time its oldest item allows)")
	f.IntVar(&o.maxBody, "max-body", kserve.DefaultMaxBodyBytes, "largest request body (HTTP) or message (gRPC), bytes, after decompression too")
	f.BoolVar(&o.door, "overload-control", true, "refuse infer requests at the door, before decoding them (429 with Retry-After, gRPC RESOURCE_EXHAUSTED), beyond an adaptive limit on those in flight that shrinks while the gateway's goroutines wait for a CPU over 2 ms (p90) and grows back when they do not (docs/traffic.md, \"Overload control\"); false: no limit")
	f.DurationVar(&o.doorOpts.TargetDelay, "overload-delay", kserve.DefaultOverloadTargetDelay, "with --overload-control: the scheduling delay (p90 of the time the gateway's goroutines wait for a CPU) over which the door shrinks its limit")
	f.DurationVar(&o.doorOpts.Hold, "overload-hold", kserve.DefaultOverloadHold, "with --overload-control: hold a refusal (an HTTP 429, at the door or after decoding; a gRPC RESOURCE_EXHAUSTED after decoding) this long before answering it when its connection was refused less than the Retry-After ago (a client retrying at once), so such clients cannot spend the gateway's CPU on refusals; 0: never (docs/traffic.md, \"Holding the refusal\")")
	f.IntVar(&o.doorOpts.MinLimit, "overload-min-limit", kserve.DefaultOverloadMinLimit, "with --overload-control: the door's limit never goes below this many infer requests in flight")
	f.Int64Var(&o.maxInflight, "max-inflight-bytes", 0, "request bytes all requests in flight may hold together (bodies, decompressed, decoded); past it 503 + Retry-After (0: a fifth of the cgroup memory limit, else 3 x --max-body; < 0: off; docs/security.md)")
	f.DurationVar(&o.headerTimeout, "header-timeout", kserve.DefaultHeaderTimeout, "how long a client may take to send a request's headers; a half-sent request's connection is closed after it")
	f.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:8002", "host:port of the admin listener: the admin API, /metrics and /debug/pprof/, apart from the client port (\"same\": on the client port, as before; docs/security.md)")
	f.StringVar(&o.tenants, "tenants", "", "tenants file (YAML): API keys stored as SHA-256, each tenant's rate, concurrency and highest priority class; model routes then need a key (Authorization: Bearer or X-API-Key), reloaded on change (docs/security.md, \"Tenants\"); empty: off")
	f.IntVar(&o.maxConnsPerIP, "max-conns-per-ip", kserve.DefaultMaxConnsPerIP, "open HTTP connections one client address may hold (< 0: no cap)")
	f.BoolVar(&o.admission, "admission", true, "refuse at once (429), at each module, an item the machines' queues say would finish too late for its request's deadline (docs/dataplane.md, \"Admission\"); false: only the DAG's lower-bound estimate refuses, and what it admits but cannot serve in time fails with 504")
	f.BoolVar(&o.spare, "spare", true, "overflow a module's batches, when its planned machines are saturated, to the backends of the pool its plan leaves idle (models loaded there at plan apply) before refusing")
	f.BoolVar(&o.lateCommit, "late-commit", false, "Llama's late commit, per batch: a batch that would end after its earliest item is due on the machine its group chose goes to an idle machine of another of the module's planned groups that ends it in time, the cheapest machine time first, never delaying a batch open for that group (docs/dataplane.md, \"Late commit\")")
	f.IntVar(&o.locality, "locality-bytes", 0, "Cloudflow's locality: ask the backend running a module whose outputs feed another to hold each item's outputs of at least this many bytes, name them instead of sending them when the next module's batch goes to that backend, and send a batch to a free machine on the backend holding its items (docs/locality.md); 0: off")
	f.BoolVar(&o.invocationSlack, "invocation-slack", false, "time each item's flush deadline by Llama's per-invocation slack: a module's share of the time the request has left (its budget over the longest path of budgets from it to a sink) instead of its budget from now, so an item whose upstream ran early keeps the time saved and a late one flushes sooner (docs/dataplane.md, \"Per-invocation slack\")")
	f.Float64Var(&o.slack, "slack", 0.1, "share of each module's budget kept free for network and host delays, in [0, 1); at most the module's headroom in the plan (budget − WCL), so the deadline flush still fills the planned batch")
	f.Float64Var(&o.hedge, "hedge-budget", 0.05, "share of batches that may be sent a second time, to another machine, when they run past twice their profiled duration (the first answer wins), in [0, 1]; 0: no hedging")
	f.DurationVar(&o.probeEvery, "probe-interval", time.Second, "without --consul: how often each backend is health-probed (grpc.health.v1, else ServerReady); a failed probe takes it out of the dispatch table until a probe passes")
	f.BoolVar(&o.calibrate, "calibration", true, "learn each device's batch durations from the batches it runs and plan, admit and re-plan (on a drift of more than 10% for 1 s) with them where measured (docs/calibration.md); false: the offline profiles only")
	f.StringVar(&o.calFile, "calibration-file", "", "with --calibration: read the learned durations from this file at start (if it exists) and write them to it every 10 s and on shutdown, so a restart does not forget (with --consul and no file: the cluster's Consul KV, <cluster-prefix>/calibration/<gateway id>)")
	f.StringVar(&o.logFmt, "log", logFormats.Names()[0], logFlagHelp)
	f.DurationVar(&o.drain, "drain", 10*time.Second, "on shutdown, how long to let requests in flight finish")
	f.DurationVar(&o.drainDelay, "drain-delay", 0, "on shutdown, how long to keep accepting requests while reporting not ready (HTTP /v2/health/ready 503, gRPC health NOT_SERVING) before draining; in Kubernetes, more than the readiness probe's period × failureThreshold")
	f.StringVar(&o.adminToken, "admin-token", "", "bearer token of the admin API under /admin/, named \"admin\" in the config history (default: $PICCOLO_ADMIN_TOKEN; empty, and no --admin-tokens: the admin API is off)")
	f.StringVar(&o.adminTokens, "admin-tokens", "", "file of named admin tokens, each accepted as --admin-token is and named in the config history: a YAML list of {name, sha256}, sha256 the token's SHA-256 in hex (printf %s \"$TOKEN\" | sha256sum), so the file holds no secret (a mounted Kubernetes Secret works); read at start")
	addFusionFlag(f, &o.noFuse)
	addTracingFlags(f, &o.tracing)
	f.BoolVar(&o.watch, "watch", true, "reload the -c files when they change (invalid edits are logged and ignored)")
	f.StringVar(&o.consul, "consul", "", "take the backends from the Consul agent at this host:port (HTTP API; service "+membership.ServiceName+") and join its cluster: the elected scheduler re-plans on membership, rate and config changes (default: the config's backends list, re-planned by the gateway's own control loop; a config with membership: consul requires this flag)")
	f.StringVar(&o.clusterPrefix, "cluster-prefix", cluster.DefaultPrefix, "with --consul: the Consul KV prefix of this cluster's config, plan, lock and rates")
	f.BoolVar(&o.schedule, "schedule", true, "with --consul: also run for the cluster's scheduler (false: only follow the published plan)")
	f.StringVar(&o.schedulerID, "scheduler-id", "", "with --consul: this gateway's scheduler candidate id (default gateway-<gateway id>)")
	f.DurationVar(&o.schedulerTTL, "scheduler-ttl", cluster.DefaultTTL, "with --consul: how long the elected scheduler may miss heartbeats before a standby takes over (>= 1s)")
	f.StringVar(&o.gatewayID, "gateway-id", "", "with --consul: this gateway's id for its rate reports (default <host>-<HTTP port>)")
	f.DurationVar(&o.configWait, "config-wait", 15*time.Second, "with --consul: how long an admin change waits for its plan to go live before answering")
	o.tls.register(f, "serve HTTPS and gRPC")
	f.StringVar(&o.backendToken, "backend-token", "", "the gateway's credential towards the backends, sent on every call (backends started with --admin-token ask it of model load/unload); with --consul, a backend whose registration does not carry its HMAC is refused (default: $"+backendTokenEnv+")")
	addConsulAuthFlags(f, &o.consulAuth)
	f.StringVar(&o.backendTLSMode, "backend-tls", "preferred", "who decides whether a backend is called over TLS: required (every backend, whatever it registered), preferred (the backend's entry: tls: true in backends:, or meta tls=true in Consul) or off (none)")
	f.StringVar(&o.backendCA, "backend-ca", "", "verify the backends that serve TLS (tls: true in backends:, or meta tls=true in Consul) with the CAs in this PEM file (default: the system's roots)")
	f.StringVar(&o.backendCert, "backend-cert", "", "present this PEM certificate to the backends that serve TLS and ask for one (backend --tls-client-ca), reloaded when it changes; needs --backend-key")
	f.StringVar(&o.backendKey, "backend-key", "", "the PEM private key of --backend-cert")
	addGatewayTraceFlags(f, o)
	return cmd
}

// runGateway serves until ctx ends, then drains (gateway/process.Run).
// ready is called with the bound addresses once both servers accept
// connections.
func runGateway(ctx context.Context, o *gatewayOptions, ready func(httpAddr, grpcAddr string)) error {
	if given := o.traceGiven(); o.trace.File == "" && !o.tune && len(given) > 0 {
		return fmt.Errorf("--%s given without --trace: they say how to plan for a trace", strings.Join(given, ", --"))
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		return err
	}
	backendTLS, err := o.backendTLS()
	if err != nil {
		return err
	}
	sessionUtil, err := sessionCaps(o.sessionUtil, o.maxUtil)
	if err != nil {
		return err
	}
	return gatewayprocess.Run(ctx, gatewayprocess.Options{Files: o.files, Listen: o.listen, GRPCListen: o.grpcListen, NoFuse: o.noFuse,
		Policy: o.policy, MaxUtil: o.maxUtil, SessionUtil: sessionUtil, Burst: o.burst, Dispatch: o.dispatch, Flush: o.flush, MaxBody: o.maxBody, MaxInflight: o.maxInflight, AdminListen: adminListen(o.adminListen), Tenants: o.tenants, ConsulAuth: o.consulAuth, HeaderTimeout: o.headerTimeout, MaxConnsPerIP: o.maxConnsPerIP, Door: o.door, DoorOpts: o.doorOpts, Slack: o.slack, InvocationSlack: o.invocationSlack, LateCommit: o.lateCommit, Locality: o.locality,
		Admission: o.admission, Hedge: o.hedge, ProbeEvery: o.probeEvery, Spare: o.spare, Calibrate: o.calibrate, CalFile: o.calFile,
		Drain: o.drain, DrainDelay: o.drainDelay, AdminToken: adminToken(o.adminToken), AdminTokens: o.adminTokens, Watch: o.watch, Consul: o.consul,
		ClusterPrefix: o.clusterPrefix, Schedule: o.schedule, SchedulerID: o.schedulerID, SchedulerTTL: o.schedulerTTL, GatewayID: o.gatewayID,
		ConfigWait: o.configWait, Trace: o.trace, PlanFile: o.planFile, Tune: o.tune, TuneScope: o.tuneScope, TLS: tlsCfg, BackendTLS: backendTLS, BackendTLSMode: o.backendTLSMode, BackendToken: backendToken(o.backendToken),
		Tracing: o.tracing.options(), NewLogger: newLogger(o.logFmt), Version: version, Loop: o.loop, Monitor: o.monitor, OnPlan: o.onPlan}, ready)
}

// adminListen is --admin-listen as gatewayprocess.Options.AdminListen:
// "same" is "" (the admin API and /metrics on the client port).
func adminListen(v string) string {
	if v == "same" {
		return ""
	}
	return v
}

// sessionCaps parses --session-utilization (session name → cap). Each cap
// must be a number in (0, 1], and --max-utilization must be given: without
// it the burst check chooses every session's cap.
func sessionCaps(flag map[string]string, maxUtil float64) (map[string]float64, error) {
	if len(flag) == 0 {
		return nil, nil
	}
	if maxUtil == 0 {
		return nil, errors.New("--session-utilization needs --max-utilization: without it the burst check chooses each session's cap")
	}
	out := make(map[string]float64, len(flag))
	for name, v := range flag {
		u, err := strconv.ParseFloat(v, 64)
		if err != nil || !(u > 0 && u <= 1) {
			return nil, fmt.Errorf("--session-utilization %s=%s: the cap must be a number in (0, 1]", name, v)
		}
		out[name] = u
	}
	return out, nil
}
