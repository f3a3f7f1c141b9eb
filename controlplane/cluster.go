package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
)

// ConsulControl is the control plane of `piccolo gateway --consul`
// (docs/control-plane.md, "Distribution"): the gateway follows the plan the
// cluster's re-planner publishes in Consul KV and, unless --schedule=false,
// runs a re-planner candidate itself (scheduler/cluster.Replanner), so one
// gateway alone runs itself and several gateways elect one scheduler.
//
//   - follow (WatchPlan's goroutine): each new Record → LiveSwitch.Apply(its
//     config with backends, its placed plan) → DAGRunner.SetSessions →
//     ConfigStore.Adopt when the sessions changed elsewhere → Metrics.SetPlan.
//   - report (a ticker): the request-path rate counters → Consul rates/<id>.
//   - watch (membership): the admin API's backends view and the
//     piccolo_membership* metrics; the scheduler has its own watch.
//   - Apply (ConfigStore.Update's goroutine): an operator's change is
//     planned here to refuse what cannot be planned (422, nothing changes),
//     written to Consul with check-and-set, and answered once a plan for it is
//     live on this gateway.
//
// The request path only reads counters through an atomic pointer.
type ConsulControl struct {
	log     *zap.Logger
	metrics *metrics.Metrics
	opts    dataplane.LiveOptions
	ctx     context.Context
	kv      *cluster.Client
	sched   *cluster.Replanner // nil with --schedule=false
	stopped chan struct{}      // closed when sched.Run has returned (lock released)
	pipe    Pipeline
	id      string
	wait    time.Duration // how long a config change waits for its plan
	histLen int           // how many versions the cluster's history keeps
	onPlan  func(PlanEvent)

	latest atomic.Pointer[cluster.Record] // the newest record seen (applied or not)
	rates  *arrivals

	mu      sync.Mutex // guards everything below (follow, Attach, Apply, Backends)
	sw      *dataplane.LiveSwitch
	exec    *gateway.DAGRunner
	store   *ConfigStore
	applied *cluster.Record // the record live on this gateway
	served  *api.Config     // its config, without backends
	snap    membership.Snapshot
	first   chan struct{} // closed once the first plan is live
	changed chan struct{} // closed and replaced at every applied record
}

// PlanEvent is one plan made live by the cluster control: what caused it, when
// the scheduler saw the cause (Trigger) and when this gateway had the new
// dispatch table live.
type PlanEvent struct {
	Cause   string
	Trigger time.Time
	Live    time.Time
	Plan    *api.Plan
	Leader  string
}

// ClusterOptions configure the cluster control (`piccolo gateway --consul`).
type ClusterOptions struct {
	Consul       string                // the Consul agent's HTTP address host:port
	ConsulAuth   membership.ConsulAuth // its ACL token and TLS (the CONSUL_* environment for what is not given)
	BackendToken string                // the credential every backend's registration must carry ("": none asked)
	Prefix       string                // KV prefix of the cluster (cluster.DefaultPrefix)
	Schedule     bool                  // also run a scheduler candidate in this gateway
	SchedulerID  string                // the candidate's id (default gateway-<GatewayID>)
	SchedulerTTL time.Duration         // the candidate's heartbeat TTL
	GatewayID    string                // this gateway's id in Consul (default <host>-<port of Listen>)
	Listen       string                // the HTTP listen address, for the default GatewayID
	ConfigWait   time.Duration         // how long a config change waits for its plan (default 15s)
	Fuse         bool                  // the config pipeline's fuse step (off: --no-fusion)
	Fusions      io.Writer             // told each fusion made (optional)
	// HistoryLen is how many versions the cluster's config history in
	// Consul KV keeps (default HistoryLen).
	HistoryLen int

	// Tests only: the control loop's options (Plan, Target are set here), the
	// rate monitor's, and a hook called with every plan made live.
	Loop    replan.Options
	Monitor replan.MonitorOptions
	OnPlan  func(PlanEvent)
}

// StartConsulControl starts following the cluster's plan (and, with
// o.Schedule, campaigning to be its scheduler) and returns once the first plan
// is live (cc.sw serves it). Until then it waits, logging why, until ctx ends.
func StartConsulControl(ctx context.Context, o ClusterOptions, cfg *api.Config, metrics *metrics.Metrics, log *zap.Logger,
	live dataplane.LiveOptions, planner Planner) (*ConsulControl, error) {
	pipe := Pipeline{Planner: planner, NoFusion: !o.Fuse, Fusions: o.Fusions}
	cfg, err := pipe.Fuse(cfg)
	if err != nil {
		return nil, err
	}
	kv, err := cluster.New(o.Consul, cluster.Options{Prefix: o.Prefix, Logger: log, Auth: o.ConsulAuth, BackendToken: o.BackendToken})
	if err != nil {
		return nil, fmt.Errorf("--consul %s: %w", o.Consul, err)
	}
	rates, err := newArrivals(time.Now(), o.Monitor)
	if err != nil {
		return nil, err
	}
	w, err := membership.NewConsul(o.Consul, membership.ConsulOptions{Logger: log, Auth: o.ConsulAuth, BackendToken: o.BackendToken})
	if err != nil {
		return nil, fmt.Errorf("--consul %s: %w", o.Consul, err)
	}
	cc := &ConsulControl{log: log, metrics: metrics, opts: live, ctx: ctx, kv: kv, pipe: pipe, id: o.GatewayID,
		wait: o.ConfigWait, onPlan: o.OnPlan, rates: rates, first: make(chan struct{}), changed: make(chan struct{}),
		stopped: make(chan struct{})}
	if cc.id == "" {
		cc.id = defaultGatewayID(o.Listen)
	}
	if cc.wait <= 0 {
		cc.wait = 15 * time.Second
	}
	if cc.histLen = o.HistoryLen; cc.histLen <= 0 {
		cc.histLen = HistoryLen
	}
	rates.track(cfg)
	if o.Schedule {
		id := o.SchedulerID
		if id == "" {
			id = "gateway-" + cc.id
		}
		loop := o.Loop
		loop.Chains = live.Locality > 0 // while it leads: this gateway's locality for every gateway's plan
		cc.sched, err = cluster.NewReplanner(kv, cluster.ReplannerOptions{ID: id, Seed: cfg, Plan: pipe.Plan, Members: w,
			Loop: loop, TTL: o.SchedulerTTL, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--scheduler-ttl/--scheduler-id: %w", err)
		}
		go func() { defer close(cc.stopped); _ = cc.sched.Run(ctx) }()
	}
	go cc.watch(ctx, membership.Updates(ctx, w))
	go func() { _ = kv.WatchPlan(ctx, cc.follow) }()
	go func() { _ = rates.mon.Run(ctx, replan.SystemClock{}) }()

	warn := time.NewTicker(5 * time.Second)
	defer warn.Stop()
	for {
		select {
		case <-cc.first:
			go cc.report(ctx)
			return cc, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the cluster's first plan in Consul at %s: %w", o.Consul, ctx.Err())
		case <-warn.C:
			log.Warn("no plan in Consul yet: waiting for the cluster's scheduler to publish one (is a scheduler running, and a backend registered?)",
				zap.String("consul", o.Consul), zap.String("plan_key", kv.PlanKey()), zap.Bool("scheduler_here", o.Schedule))
		}
	}
}

// WaitStepDown waits, up to timeout, for this gateway's re-planner candidate to
// release the lock and deregister after ctx ended, so a standby takes over at
// once instead of after the TTL.
func (cc *ConsulControl) WaitStepDown(timeout time.Duration) {
	if cc.sched == nil {
		return
	}
	select {
	case <-cc.stopped:
	case <-time.After(timeout):
		cc.log.Warn("the scheduler candidate did not step down in time; a standby takes over after the TTL", zap.Duration("waited", timeout))
	}
}

// defaultGatewayID is "<host>-<HTTP port>": unique per gateway on a host
// (with --listen port 0, "<host>-<pid>-<random>").
func defaultGatewayID(listen string) string {
	_, port, _ := net.SplitHostPort(listen)
	if port == "" || port == "0" { // any free port: not known yet, and not unique in a process
		return fmt.Sprintf("%s-%06x", cluster.DefaultID(), rand.N(1<<24))
	}
	return cluster.Hostname() + "-" + port
}

// follow makes a published record live on this gateway. A record this gateway
// cannot apply is logged and the running plan stays: one a backend refused is
// tried again every 2 s while it is the newest; one whose config the loader
// refuses waits for the next record.
func (cc *ConsulControl) follow(rec *cluster.Record) {
	cc.latest.Store(rec)
	if !cc.apply(rec) {
		// Try the same record again while it is the newest (a backend that
		// refused the load may be restarting); a newer record supersedes it.
		time.AfterFunc(2*time.Second, func() {
			if cc.ctx.Err() == nil && cc.latest.Load() == rec {
				cc.follow(rec)
			}
		})
	}
}

// apply makes rec live; false when it could not and a retry may succeed
// (logged; the last plan stays). A record whose config does not load is
// logged and not retried: the same text would fail again.
func (cc *ConsulControl) apply(rec *cluster.Record) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.latest.Load() != rec {
		return true // superseded while waiting for the lock (a retry racing a newer record)
	}
	if cc.applied != nil && cc.applied.Config == rec.Config && replan.SamePlan(cc.applied.Plan, rec.Plan) {
		// A new leader's first plan, or one re-published: the dispatch table
		// stays; only what the record says about it changes.
		cc.applied = rec
		cc.metrics.SetPlanSource(rec.Version, rec.Leader)
		cc.metrics.SetCapacity(capacity(rec.Capacity))
		cc.notifyLocked(rec, time.Now())
		return true
	}
	full, err := cluster.DecodeConfig("consul plan record", []byte(rec.Config))
	if err != nil {
		cc.log.Error("published plan not applied: its config is not valid; waiting for the next one", zap.Uint64("version", rec.Version), zap.Error(err))
		return true
	}
	cfg := cluster.WithoutBackends(full)
	if cal := cc.opts.Calibration; cal != nil {
		// This gateway's batches are counted at the profile entries of the
		// config it serves (the leader's merge lines up with them), leading
		// or not.
		cal.SetOffline(cfg)
	}
	if cc.sw == nil {
		sw, err := dataplane.NewLiveSwitch(cc.ctx, full, rec.Plan, cc.opts)
		if err != nil {
			cc.log.Error("published plan not applied", zap.Uint64("version", rec.Version), zap.String("leader", rec.Leader), zap.Error(err))
			return false
		}
		cc.sw = sw
		defer close(cc.first)
	} else if err := cc.sw.Apply(cc.ctx, full, rec.Plan); err != nil {
		cc.log.Error("published plan not applied; serving the last one", zap.Uint64("version", rec.Version),
			zap.String("leader", rec.Leader), zap.Error(err))
		return false
	}
	live := time.Now()
	cc.applied, cc.served = rec, cfg
	cc.syncSessionsLocked("config")
	cc.rates.track(cfg)
	if err := cc.metrics.SetPlan(rec.Plan, rec.Cause, time.Duration(rec.PlanTookMs*1e6)); err != nil {
		cc.log.Warn("plan metrics", zap.Error(err))
	}
	cc.metrics.SetPlanSource(rec.Version, rec.Leader)
	cc.metrics.SetCapacity(capacity(rec.Capacity))
	cc.log.Info("new plan live", zap.String("cause", rec.Cause), zap.String("leader", rec.Leader), zap.Uint64("version", rec.Version),
		zap.Float64("plan_cost", rec.Plan.TotalCost), zap.Duration("since_trigger", live.Sub(rec.Trigger)),
		zap.Int("devices_missing", rec.DevicesMissing))
	cc.notifyLocked(rec, live)
	return true
}

// notifyLocked wakes the config changes waiting for their plan, and the tests' hook.
func (cc *ConsulControl) notifyLocked(rec *cluster.Record, live time.Time) {
	close(cc.changed)
	cc.changed = make(chan struct{})
	if cc.onPlan != nil {
		cc.onPlan(PlanEvent{Cause: rec.Cause, Trigger: rec.Trigger, Live: live, Plan: rec.Plan, Leader: rec.Leader})
	}
}

// syncSessionsLocked makes the DAGRunner and the config store serve the applied
// record's sessions when they differ (a change made at another gateway, or a
// record applied between StartConsulControl and attach).
func (cc *ConsulControl) syncSessionsLocked(cause string) {
	if cc.exec == nil || cc.store == nil || cc.served == nil {
		return
	}
	cur := cc.store.Current().Config
	if sameShared(cur, cc.served) {
		return
	}
	if err := cc.exec.SetSessions(cc.served.Sessions); err != nil {
		cc.log.Error("serve the published sessions", zap.Error(err)) // cannot happen: the loader validated them
		return
	}
	cc.metrics.SetDAGRunner(cc.exec)
	cc.store.Adopt(cc.served, cause)
}

// Attach hands the control plane the DAGRunner and the config store, made after
// the first plan went live.
func (cc *ConsulControl) Attach(exec *gateway.DAGRunner, store *ConfigStore) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.exec, cc.store = exec, store
	exec.ObserveArrivals(cc.rates) // for the cluster's rate reports
	cc.syncSessionsLocked("config")
}

// ServedConfig is the config of the first live plan, without backends: what
// the DAGRunner and the config store start with.
func (cc *ConsulControl) ServedConfig() *api.Config {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.served
}

// Apply is the ConfigStore's OnConfig with Consul: the config pipeline's fuse,
// plan and check steps here (refusing what cannot be planned, as
// EmbeddedControl does), then the config, its checked plan and its entry in
// the cluster's history (who and note from ctx, WithWho; the checked plan's
// cost; cluster_history.go) stored in Consul in one transaction if nobody
// changed the config meanwhile (the leader places that plan: the change is
// planned once), and return once a plan made for it is live on this gateway
// (or an error saying it is stored but not yet planned). The history version
// the change got is told to ctx's version sink (withVersionSink).
func (cc *ConsulControl) Apply(ctx context.Context, cfg *api.Config, cause string) error {
	cfg, err := cc.pipe.Fuse(cfg)
	if err != nil {
		return err
	}
	cc.mu.Lock()
	prev, prevCfg, ifIndex := cc.applied.Plan, cc.served, cc.applied.ConfigIndex
	prevCost := 0.0
	if prev != nil {
		prevCost = prev.TotalCost
	}
	// Planned with the members as backends: the planner then plans only the
	// hardware present (PlanForServing), as the leader will, so a change only
	// an absent type could serve is refused here (422), not accepted and then
	// served as 503.
	withMembers := *cfg
	withMembers.Backends = cc.snap.Backends()
	cc.mu.Unlock()
	start := time.Now()
	plan, planErr := cc.pipe.Plan(&withMembers)
	if plan == nil {
		return fmt.Errorf("plan: %w", planErr)
	}
	if err := serving.Check(plan, cfg, prev, prevCfg); err != nil {
		return err
	}
	// The checked plan goes to Consul with the config: the leader places it
	// instead of planning the change again (cluster.Client.ConfigPlanFor).
	cp := &cluster.ConfigPlan{Plan: plan, TookMs: float64(time.Since(start)) / 1e6}
	if planErr != nil {
		cp.Error = planErr.Error()
	}
	who, note := whoOf(ctx, cause)
	hw, version, err := cc.historyWrite(ctx, prevCfg, cfg, ifIndex, prevCost, plan.TotalCost, cause, who, note)
	if err != nil {
		return fmt.Errorf("the cluster's history: %w", err)
	}
	idx, err := cc.kv.PutConfigLogged(ctx, cfg, cp, ifIndex, hw)
	if err != nil {
		if errors.Is(err, cluster.ErrConfigChanged) {
			return fmt.Errorf("the cluster's config was changed at another gateway (or its plan is not live here yet): read it again and retry: %w", err)
		}
		return err
	}
	tellVersion(ctx, version)
	timeout := time.NewTimer(cc.wait)
	defer timeout.Stop()
	for {
		cc.mu.Lock()
		done := cc.applied.ConfigIndex >= idx
		ch := cc.changed
		cc.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("stored in Consul (%s index %d), not yet live here: %w", cc.kv.ConfigKey(), idx, ctx.Err())
		case <-timeout.C:
			return fmt.Errorf("stored in Consul (%s index %d) but no plan for it went live within %v: is a scheduler running? It goes live when one publishes",
				cc.kv.ConfigKey(), idx, cc.wait)
		}
	}
}

// watch keeps the admin API's backends view and the membership metrics; a
// Stale snapshot keeps the last members and sets piccolo_membership_stale.
func (cc *ConsulControl) watch(ctx context.Context, updates <-chan membership.Snapshot) {
	stale := false
	for s := range updates {
		if s.Stale {
			if !stale {
				cc.mu.Lock()
				n := len(cc.snap.Members)
				cc.mu.Unlock()
				cc.log.Warn("membership source unreachable: serving the last plan and members", zap.Int("members", n), zap.Error(s.Err))
			}
			stale = true
			cc.mu.Lock()
			cc.snap.Stale, cc.snap.Err = true, s.Err // the admin view: the last members, marked stale
			cc.mu.Unlock()
			cc.metrics.SetMembershipStale(true)
			continue
		}
		if stale {
			cc.log.Info("membership source back", zap.Int("members", len(s.Members)))
			stale = false
		}
		cc.mu.Lock()
		cc.snap = s
		cc.mu.Unlock()
		cc.metrics.SetMembership(s.Backends())
		cc.metrics.SetMembershipStale(false)
	}
}

// report writes the measured rates to Consul every second, for the cluster's
// scheduler. A failed write is logged once per outage (the scheduler drops a
// gateway's rates that stop changing).
func (cc *ConsulControl) report(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = cc.kv.DeleteRates(dctx, cc.id)
			cancel()
			return
		case now := <-t.C:
			err := cc.kv.PutRates(ctx, cc.id, cc.rates.mon.Snapshot(now))
			if err != nil && !failing && ctx.Err() == nil {
				cc.log.Warn("cannot report rates to Consul", zap.Error(err))
			}
			failing = err != nil
		}
	}
}

// Backends is the admin API's view of the Consul membership.
func (cc *ConsulControl) Backends() BackendView {
	cc.mu.Lock()
	s := cc.snap
	cc.mu.Unlock()
	v := BackendView{Source: "consul", Stale: s.Stale, At: s.At}
	if s.Err != nil {
		v.Error = s.Err.Error()
	}
	for _, m := range s.Members {
		v.Backends = append(v.Backends, BackendInfo{ID: m.ID, Address: m.Address, Hardware: m.Hardware, Price: m.Price,
			GPU: m.GPU, GPUMemoryBytes: m.GPUMemoryBytes, Models: m.Models})
	}
	return v
}

// sameShared reports whether two configs share the same sessions, hardware and
// profiles (sources and backends aside).
func sameShared(a, b *api.Config) bool {
	x, err1 := api.EncodeYAML(&api.Config{Hardware: a.Hardware, Profiles: a.Profiles, Sessions: a.Sessions})
	y, err2 := api.EncodeYAML(&api.Config{Hardware: b.Hardware, Profiles: b.Profiles, Sessions: b.Sessions})
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// LiveSwitch is the live switch serving the cluster's plan on this gateway.
func (cc *ConsulControl) LiveSwitch() *dataplane.LiveSwitch {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.sw
}

// Runner is what the DAGRunner runs modules on: the live switch.
func (cc *ConsulControl) Runner() gateway.ModuleRunner {
	return cc.LiveSwitch()
}

// Scheduler is this gateway's re-planner candidate; nil when Schedule is false.
func (cc *ConsulControl) Replanner() *cluster.Replanner { return cc.sched }

// GatewayID is this gateway's id in Consul (ClusterOptions.GatewayID or its
// default).
func (cc *ConsulControl) GatewayID() string { return cc.id }
