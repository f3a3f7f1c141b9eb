package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/internal/tlsfiles"
	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
	"github.com/piccolo-serving/piccolo/simulate"
	"github.com/piccolo-serving/piccolo/tracing"
)

// Options are `piccolo gateway`'s settings, one field per flag (named
// in the comments); Run checks them. Errors name those flags.
type Options struct {
	Files      []string // -c: config files (merged)
	Listen     string   // --listen: HTTP host:port (port 0: any free port)
	GRPCListen string   // --grpc-listen: gRPC host:port (must differ from Listen)
	NoFuse     bool     // --no-fusion: serve the modules as configured (docs/fusion.md)
	Policy     string   // --policy: a name of planner.Policies
	MaxUtil    float64  // --max-utilization, in (0,1]; 0: chosen by simulation
	// SessionUtil (--session-utilization), with MaxUtil, plans the sessions
	// it names at their own caps (planner.Options.SessionUtilization).
	SessionUtil map[string]float64
	Burst       float64 // --burst-target: simulated share of requests within the SLO
	Dispatch    string  // --dispatch: a dispatcher policy name
	Flush       string  // --flush: a dispatcher flush name ("": idle)
	MaxBody     int     // --max-body: largest request body or message, bytes, > 0
	Slack       float64 // --slack: share of each module's budget kept free, in [0, 1)
	// InvocationSlack (--invocation-slack) times each item's flush deadline
	// by Llama's per-invocation slack (dataplane.LiveOptions.InvocationSlack).
	InvocationSlack bool
	// LateCommit (--late-commit) is dataplane.LiveOptions.LateCommit:
	// Llama's late commit, per batch, across a module's planned groups.
	LateCommit bool
	// Locality (--locality-bytes) is dataplane.LiveOptions.Locality: the
	// smallest output a backend is asked to hold (docs/locality.md); 0: off.
	Locality  int
	Admission bool    // --admission: refuse at each module what would finish too late
	Hedge     float64 // --hedge-budget: share of batches sent twice, in [0, 1]
	// ProbeEvery (--probe-interval) is how often a static backend is
	// health-probed (0: 1 s).
	ProbeEvery time.Duration
	Spare      bool          // --spare: overflow onto the backends the plan leaves idle
	Calibrate  bool          // --calibration: learn batch durations from the batches run
	CalFile    string        // --calibration-file: where the calibration is kept
	Drain      time.Duration // --drain: how long requests in flight may finish on shutdown
	DrainDelay time.Duration // --drain-delay: serve this long while not ready, then drain
	AdminToken string        // --admin-token (or $PICCOLO_ADMIN_TOKEN), named "admin"; "" and no AdminTokens: admin API off
	// AdminTokens (--admin-tokens FILE) is a file of named admin tokens
	// (controlplane.LoadAdminTokens: a YAML list of {name, sha256}); "": none.
	AdminTokens string
	Watch       bool // --watch: reload the -c files when they change

	// With Consul (--consul, controlplane/cluster.go, scheduler/cluster).
	Consul        string        // --consul: the agent's HTTP host:port; "": static membership
	ClusterPrefix string        // --cluster-prefix: KV prefix of the cluster
	Schedule      bool          // --schedule: run a re-planner candidate here
	SchedulerID   string        // --scheduler-id: the candidate's id
	SchedulerTTL  time.Duration // --scheduler-ttl: the candidate's heartbeat TTL
	GatewayID     string        // --gateway-id: this gateway's id in Consul
	ConfigWait    time.Duration // --config-wait: how long an admin change waits for its plan

	// What the plan step plans for (docs/traffic.md): --trace and its flags,
	// or --plan; --tune runs InferLine's tuner on the traced session, or
	// with --tune-scope pipeline coarse-grained tuning (replan.TunerScopes;
	// "": module).
	Trace     simulate.Traffic // Source, Session, Duration, Target, Search
	PlanFile  string           // --plan: a plan JSON (piccolo plan --no-fusion -o json)
	Tune      bool             // --tune
	TuneScope string           // --tune-scope

	TLS        *tls.Config     // HTTPS and gRPC TLS to clients (--tls-*); nil: plain text
	BackendTLS *tls.Config     // towards the backends that serve TLS (--backend-*); nil: defaults
	Tracing    tracing.Options // --otlp-*, --trace-sampling (Service is set here)
	// NewLogger makes the process's logger (--log); nil: zap.NewProduction.
	NewLogger func() (*zap.Logger, error)
	Version   string // what the servers report (GET /v2, ServerMetadata)

	// Door (--overload-control) turns on the door, the gateway's own overload
	// control, with DoorOpts (--overload-delay, --overload-min-limit; zero
	// fields: kserve's defaults).
	Door     bool
	DoorOpts kserve.OverloadOptions
	// MaxInflight (--max-inflight-bytes) is the in-flight bytes budget (0:
	// a fifth of the cgroup memory limit; < 0: off); HeaderTimeout
	// (--header-timeout) and MaxConnsPerIP (--max-conns-per-ip) bound the
	// HTTP connections (0: kserve's defaults). docs/security.md.
	MaxInflight   int64
	HeaderTimeout time.Duration
	MaxConnsPerIP int
	// AdminListen (--admin-listen) is where the admin API, /metrics and
	// pprof listen, apart from the client port; "": on the client port
	// (in-process tests, a gateway on loopback), with a warning when
	// --listen is not a loopback address. docs/security.md.
	AdminListen string
	// BackendTLSMode (--backend-tls): required, preferred ("": the
	// backend's entry decides) or off (dataplane.LiveOptions.BackendTLSMode).
	BackendTLSMode string
	// BackendToken (--backend-token, $PICCOLO_BACKEND_TOKEN) is sent to the
	// backends on every call: the credential a backend started with
	// --admin-token asks of model load and unload. "": none.
	BackendToken string
	// ConsulAuth (--consul-token, --consul-cacert, ...; the CONSUL_*
	// environment for what is not given) is the gateway's ACL token and TLS
	// towards Consul; with --consul and BackendToken, a backend whose
	// registration lacks the credential is refused (membership.Credential).
	ConsulAuth membership.ConsulAuth
	// Tenants (--tenants) is the tenants file: API keys, rates, concurrency
	// and priority classes (package tenants); "": off.
	Tenants string

	// Tests only: the control loop's options (Plan, Target are set by the
	// wiring) and a hook called with every plan made live.
	Loop    replan.Options
	Monitor replan.MonitorOptions
	OnPlan  func(controlplane.PlanEvent)
}

// ErrNoConsul is Run's answer to a config with membership: consul
// and no Consul agent given.
var ErrNoConsul = errors.New("membership consul needs --consul ADDR (the Consul agent's HTTP address host:port)")

// Run runs a gateway as o says until ctx ends: it loads the config,
// starts the control plane (controlplane.StartGateway: the config pipeline's first plan
// live on the backends), the admin API, the -c file watcher and the KServe v2
// HTTP and gRPC servers, and calls ready, when set, with their bound
// addresses once both accept connections. When ctx ends it reports not
// ready, keeps serving for o.DrainDelay, drains for up to o.Drain, steps its
// re-planner candidate down and returns nil. Errors, each naming its flag:
// no -c files, an unknown dispatch or flush policy, a value out of range, a
// TLS file that does not load, the same port for HTTP and gRPC, a config
// with no sessions or (without Consul) no backends, a trace or plan file
// that does not read or fit, a planner that makes no plan, a listener that
// cannot bind, or a server failing.
func Run(ctx context.Context, o Options, ready func(httpAddr, grpcAddr string)) error {
	if len(o.Files) == 0 {
		return errors.New("no config given: pass -c FILE (repeatable) with hardware, profiles, sessions and backends")
	}
	pol, err := dispatcher.ParsePolicy(o.Dispatch)
	if err != nil {
		return fmt.Errorf("--dispatch: %w", err)
	}
	if o.Flush == "" {
		o.Flush = dispatcher.FlushIdle.Name()
	}
	flush, err := dispatcher.ParseFlush(o.Flush)
	if err != nil {
		return fmt.Errorf("--flush: %w", err)
	}
	if err := dataplane.CheckBackendTLSMode(o.BackendTLSMode); err != nil {
		return fmt.Errorf("--backend-tls: %w", err)
	}
	if o.MaxBody <= 0 {
		return fmt.Errorf("--max-body %d: must be > 0 bytes", o.MaxBody)
	}
	if o.Door && (o.DoorOpts.TargetDelay < 0 || o.DoorOpts.MinLimit < 0) {
		return fmt.Errorf("--overload-delay %v, --overload-min-limit %d: want a delay > 0 and a limit ≥ 1", o.DoorOpts.TargetDelay, o.DoorOpts.MinLimit)
	}
	if o.Locality < 0 {
		return fmt.Errorf("--locality-bytes %d: want 0 (off) or a byte count ≥ 1", o.Locality)
	}
	if o.Slack < 0 || o.Slack >= 1 {
		return fmt.Errorf("--slack %v: must be in [0, 1)", o.Slack)
	}
	if o.Hedge < 0 || o.Hedge > 1 || o.ProbeEvery < 0 {
		return fmt.Errorf("--hedge-budget %v, --probe-interval %v: want a share in [0, 1] and an interval ≥ 0 (0: 1s)", o.Hedge, o.ProbeEvery)
	}
	if _, port, _ := net.SplitHostPort(o.Listen); o.Listen == o.GRPCListen && port != "0" {
		return fmt.Errorf("--listen and --grpc-listen are both %s: HTTP and gRPC need their own ports", o.Listen)
	}
	var tokens []controlplane.AdminToken
	if o.AdminTokens != "" {
		if tokens, err = controlplane.LoadAdminTokens(o.AdminTokens); err != nil {
			return fmt.Errorf("--admin-tokens %s: %w", o.AdminTokens, err)
		}
	}
	cfg, err := api.Load(o.Files...)
	if err != nil {
		return err
	}
	if cfg.Membership == "consul" && o.Consul == "" {
		return ErrNoConsul
	}
	if len(cfg.Sessions) == 0 {
		return errors.New("the config has no sessions: nothing to serve")
	}
	if err := planner.CheckSessionUtilization(cfg, o.SessionUtil); err != nil {
		return fmt.Errorf("--session-utilization %w", err)
	}
	if o.Consul == "" && len(cfg.Backends) == 0 {
		return errors.New("the config has no backends: list them under `backends:` ({id, address, hardware})")
	}
	o.Tracing.Service = "piccolo-gateway"
	log, stop, err := tracing.StartProcess(ctx, o.Tracing, o.NewLogger)
	if err != nil {
		return err
	}
	defer stop()

	reg := metrics.ProcessRegistry()
	gm, err := metrics.NewMetrics(reg)
	if err != nil {
		return err
	}
	tenantTable, err := startTenants(ctx, o.Tenants, reg, log)
	if err != nil {
		return fmt.Errorf("--tenants: %w", err)
	}
	slack := o.Slack
	if slack == 0 {
		slack = -1 // LiveOptions: negative means none
	}
	hedge := o.Hedge
	if hedge == 0 {
		hedge = -1 // LiveOptions: negative means none
	}
	est, err := newCalibration(ctx, o, log, reg)
	if err != nil {
		return fmt.Errorf("--calibration-file: %w", err)
	}
	if est != nil { // a nil *Estimator in the interface would not be nil
		o.Loop.Calibration = est
	}
	liveOpts := dataplane.LiveOptions{Policy: pol, Flush: flush, SlackFraction: slack, InvocationSlack: o.InvocationSlack, LateCommit: o.LateCommit, Locality: o.Locality, Metrics: gm, Logger: log, HedgeBudget: hedge, ProbeInterval: o.ProbeEvery, Admission: o.Admission, Spare: o.Spare, BackendTLS: o.BackendTLS, BackendTLSMode: o.BackendTLSMode,
		Calibration: est}
	planOpts := serving.Options{Scheduler: planner.Options{Policy: o.Policy, MaxUtilization: o.MaxUtil, SessionUtilization: o.SessionUtil}, BurstTarget: o.Burst, NoAdmission: !o.Admission, Dispatch: pol, Flush: flush}
	planner, covers, fuse, tp, err := o.planner(cfg, planOpts, flush, zap.NewStdLog(log).Writer())
	if err != nil {
		return err
	}
	if o.BackendToken != "" {
		pool := dataplane.NewTokenPool(o.BackendToken)
		defer pool.Close()
		liveOpts.Clients = pool
	}
	gopts := controlplane.GatewayOptions{Fuse: fuse, Fusions: zap.NewStdLog(log).Writer(), Live: liveOpts, Metrics: gm, Logger: log,
		Planner: planner, Loop: o.Loop, Monitor: o.Monitor, OnPlan: o.OnPlan}
	if gopts.Loop.Covers == nil {
		gopts.Loop.Covers = covers
	}
	if o.Tune && gopts.Loop.Hold == nil {
		gopts.Loop.Hold = tp.Hold
	}
	if o.Consul != "" {
		gopts.Cluster = &controlplane.ClusterOptions{Consul: o.Consul, ConsulAuth: o.ConsulAuth, BackendToken: o.BackendToken, Prefix: o.ClusterPrefix, Schedule: o.Schedule, SchedulerID: o.SchedulerID,
			SchedulerTTL: o.SchedulerTTL, GatewayID: o.GatewayID, Listen: o.Listen, ConfigWait: o.ConfigWait}
	}
	g, err := controlplane.StartGateway(ctx, cfg, gopts)
	if errors.Is(err, controlplane.ErrNoPlan) && o.Consul == "" {
		return fmt.Errorf("--policy %s: %w", o.Policy, err)
	} else if err != nil {
		return err
	}
	ctl, sw, exec, store := g.Control, g.Switch, g.Runner, g.Store
	defer sw.Close()
	gatewayID := "" // the KV key of this gateway's calibration with --consul
	if cc, ok := ctl.(*controlplane.ConsulControl); ok {
		gatewayID = cc.GatewayID()
	}
	defer keepCalibration(ctx, est, o, gatewayID, log)()
	if o.Tune {
		if err := ctl.(*controlplane.EmbeddedControl).StartTuner(ctx, tp); err != nil {
			return err
		}
	}
	if cc, ok := ctl.(*controlplane.ConsulControl); ok && cc.Replanner() != nil {
		reg.MustRegister(metrics.LeaderGauge(cc.Replanner().Leading))
	}
	reg.MustRegister(sw)
	plan := sw.Plan()
	if est != nil {
		reg.MustRegister(metrics.ColocationCollector(colocationSeries(est, sw.Plan)))
	}
	var admin fasthttp.RequestHandler // nil: the admin API is off
	if o.AdminToken != "" || len(tokens) > 0 {
		aopts := controlplane.AdminOptions{Token: o.AdminToken, Tokens: tokens, Store: store, Plan: sw.Plan, Logger: log, Backends: ctl.Members(), Gatherer: reg}
		if ec, ok := ctl.(*controlplane.EmbeddedControl); ok {
			aopts.DryRun = ec.DryRun
			aopts.Served = simulate.Options{Policy: pol, Flush: flush, Admission: o.Admission}
		}
		if cc, ok := ctl.(*controlplane.ConsulControl); ok {
			aopts.History = cc.History // the cluster's, in Consul KV
		}
		a, err := controlplane.NewAdmin(aopts)
		if err != nil {
			return fmt.Errorf("--admin-token, --admin-tokens: %w", err)
		}
		defer a.Close()
		admin = a.Handle
	} else {
		log.Info("admin API off: pass --admin-token, set PICCOLO_ADMIN_TOKEN or pass --admin-tokens FILE to turn it on")
	}
	if o.Watch {
		cw, err := controlplane.StartConfigWatcher(ctx, store, o.Files, controlplane.WatchOptions{Logger: log})
		if err != nil {
			return err
		}
		defer cw.Close()
		reg.MustRegister(cw.Refusals())
	}
	srv, err := kserve.NewServer(exec, kserve.ServerOptions{MaxBodyBytes: o.MaxBody, MaxInflightBytes: o.MaxInflight,
		HeaderTimeout: o.HeaderTimeout, MaxConnsPerIP: o.MaxConnsPerIP, AdminApart: o.AdminListen != "", Version: o.Version, Metrics: gm, Logger: log, Admin: admin,
		Overload: o.door(), Tenants: tenantTable})
	if err != nil {
		return err
	}
	reg.MustRegister(metrics.DoorCollector(func() metrics.DoorStats {
		d := srv.OverloadStats()
		return metrics.DoorStats{Limit: d.Limit, InFlight: d.InFlight, Shed: d.Shed, ShedBySession: d.ShedBySession, ShedUnnamed: d.ShedUnnamed, DelaySeconds: d.Delay.Seconds(), Held: d.Held, Floor: d.Floor}
	}))
	hl, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.Listen, err)
	}
	hl = srv.WatchHangups(hl)
	if o.TLS != nil {
		hcfg := o.TLS.Clone() // gRPC's credentials add h2 to their own copy
		hcfg.NextProtos = []string{"http/1.1"}
		hl = tls.NewListener(hl, hcfg) // over the watched TCP connections
	}
	gl, err := net.Listen("tcp", o.GRPCListen)
	if err != nil {
		hl.Close()
		return fmt.Errorf("--grpc-listen %s: %w", o.GRPCListen, err)
	}
	hs := srv.NewHTTPServer()
	gs := srv.NewGRPCServer(append(tlsfiles.GRPCCreds(o.TLS), tracing.EdgeServerOptions()...)...)
	served := make(chan error, 3)
	adminAt := "the client port"
	if o.AdminListen != "" {
		al, err := net.Listen("tcp", o.AdminListen)
		if err != nil {
			hl.Close()
			gl.Close()
			return fmt.Errorf("--admin-listen %s: %w", o.AdminListen, err)
		}
		if o.TLS != nil {
			acfg := o.TLS.Clone()
			acfg.NextProtos = []string{"http/1.1"}
			al = tls.NewListener(al, acfg)
		}
		as := srv.NewAdminHTTPServer()
		defer as.Shutdown()
		go func() { served <- as.Serve(al) }()
		adminAt = al.Addr().String()
	} else if !loopback(hl.Addr()) {
		log.Warn("the admin API and /metrics are served on the client port, which listens beyond loopback: pass --admin-listen to serve them apart (docs/security.md)",
			zap.String("http", hl.Addr().String()))
	}
	warnOpenClientPorts(log, tenantTable, hl.Addr(), gl.Addr())
	go func() { served <- hs.Serve(hl) }()
	go func() { served <- gs.Serve(gl) }()
	log.Info("gateway serving", zap.String("http", hl.Addr().String()), zap.String("grpc", gl.Addr().String()), zap.String("admin", adminAt),
		zap.String("policy", plan.Policy), zap.String("dispatch", pol.Name()), zap.String("flush", flush.Name()), zap.Float64("plan_cost", plan.TotalCost),
		zap.Strings("sessions", exec.Sessions()))
	if ready != nil {
		ready(hl.Addr().String(), gl.Addr().String())
	}

	select {
	case err := <-served:
		hs.Shutdown()
		gs.Stop()
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	srv.SetReady(false)
	if o.DrainDelay > 0 {
		log.Info("gateway not ready; serving until the drain", zap.Duration("drain_delay", o.DrainDelay))
		time.Sleep(o.DrainDelay)
	}
	log.Info("gateway draining", zap.Duration("drain", o.Drain))
	dctx, cancel := context.WithTimeout(context.Background(), o.Drain)
	defer cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	if err := hs.ShutdownWithContext(dctx); err != nil {
		log.Warn("HTTP drain timed out; requests in flight were cut off", zap.Error(err))
	}
	select {
	case <-stopped:
	case <-dctx.Done():
		gs.Stop()
		log.Warn("gRPC drain timed out; requests in flight were cut off")
	}
	ctl.StepDown(3 * time.Second)
	log.Info("gateway stopped")
	return nil
}

// planner returns the plan step the options ask for, the rates its plans
// carry for the control loop's band (replan.Options.Covers; nil: the planned
// rates), whether the fuse step runs, and the trace planner (nil without
// --trace): with --trace, TracePlanner (the trace plan, re-planned for the
// trace scaled to a measured rate; it carries the trace's envelope); with
// --plan, FilePlanner over the file's plan (no fuse step: the plan is of the
// config's modules as written); else serving.Plan with opts. Errors name the flag:
// --tune without --trace or with --consul, an unknown --tune-scope (naming
// the allowed), --tune-scope pipeline without --tune, --trace with --plan, an
// unreadable trace or plan, a plan that does not match the config. (The
// command refuses --trace's own flags given without --trace before.)
func (o Options) planner(cfg *api.Config, opts serving.Options, flush dispatcher.Flush, tables io.Writer) (controlplane.Planner, func(map[replan.ModuleKey]float64) map[replan.ModuleKey]float64, bool, *serving.TracePlanner, error) {
	plan := opts.Planner()
	switch {
	case o.Trace.File == "" && o.Tune:
		return nil, nil, false, nil, errors.New("--tune needs --trace: the tuner compares the live arrivals with the trace the plan was made for")
	case o.Trace.File != "" && o.Tune && o.Consul != "":
		return nil, nil, false, nil, errors.New("--tune with --consul: the tuner runs in a gateway's own control loop only (without --consul)")
	case o.TuneScope != "" && replan.CheckTunerScope(o.TuneScope) != nil:
		return nil, nil, false, nil, fmt.Errorf("--tune-scope: %w", replan.CheckTunerScope(o.TuneScope))
	case o.TuneScope == replan.ScopePipeline && !o.Tune:
		return nil, nil, false, nil, errors.New("--tune-scope pipeline needs --tune: it chooses what the tuner scales")
	case o.Trace.File != "" && o.PlanFile != "":
		return nil, nil, false, nil, errors.New("--trace and --plan both given: serve either a trace's plan (--trace) or a plan written before (--plan)")
	case o.PlanFile != "":
		file, err := api.ReadPlanFile(o.PlanFile)
		if err != nil {
			return nil, nil, false, nil, fmt.Errorf("--plan: %w", err)
		}
		fp, err := serving.NewFilePlanner(cfg, file, plan)
		if err != nil {
			return nil, nil, false, nil, fmt.Errorf("--plan %s: %w", o.PlanFile, err)
		}
		return fp.Plan, nil, false, nil, nil
	case o.Trace.File != "":
		t, err := o.Trace.Read()
		if err != nil {
			return nil, nil, false, nil, fmt.Errorf("--trace: %w", err)
		}
		scope := replan.ScopeModule
		if o.Tune && o.TuneScope != "" {
			scope = o.TuneScope
		}
		tp, err := serving.NewTracePlanner(cfg, serving.TracePlannerOptions{Trace: t, Search: o.Trace.Search, Target: o.Trace.Target, Scope: scope,
			Options: opts.Scheduler, Load: simulate.Options{Session: o.Trace.Session, Duration: o.Trace.Duration, Seed: 1, Flush: flush}, Tables: tables})
		if err != nil {
			return nil, nil, false, nil, fmt.Errorf("--trace %s: %w", o.Trace.File, err)
		}
		return tp.Plan, tp.Covers, !o.NoFuse, tp, nil
	}
	return plan, nil, !o.NoFuse, nil, nil
}

// door returns the door's options: the defaults with Door, nil without.
func (o Options) door() *kserve.OverloadOptions {
	if !o.Door {
		return nil
	}
	d := o.DoorOpts
	return &d
}

// loopback reports whether addr is a loopback address (127.0.0.0/8, ::1).
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
