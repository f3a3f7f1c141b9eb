package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
)

// Static mode's control loop timing (docs/control-plane.md, "Re-planning
// without Consul"). The rates are this gateway's own, handed to the controller
// every StaticTick. A sustained rise is re-planned once the latest window is
// above planned×1.2 for StaticSustainUp and the rate over the latest four
// windows is significant (replan.Options.UpSignificance); the next tick plans
// (PlanForServing: milliseconds, the burst simulation included) and the plan is
// live some milliseconds later. A step to 2× is re-planned within 1.4 s at
// 150 req/s and 3.1 s at 50 req/s (TestUpSignificanceOnPoisson). The
// controller's 3 s default (kept with Consul, whose rates arrive every second
// through KV) would add 2.5 s. Noise at the planned rate does not re-plan.
const (
	StaticTick      = 100 * time.Millisecond
	StaticSustainUp = 500 * time.Millisecond
)

// EmbeddedOptions configure StartEmbedded.
type EmbeddedOptions struct {
	// Planner is the config pipeline's plan step (Pipeline.Planner); Fuse
	// turns its fuse step on, each fusion named on Fusions (optional).
	Planner Planner
	Fuse    bool
	Fusions io.Writer
	Live    dataplane.LiveOptions
	Metrics *metrics.Metrics // optional
	Logger  *zap.Logger      // optional

	// Loop tunes the control loop (Plan, Target and Logger are set here;
	// Tick and SustainUp default to StaticTick and StaticSustainUp); Monitor
	// the rate monitor. OnPlan, when set, is called
	// with every plan made live. Tests shorten the hysteresis with them.
	Loop    replan.Options
	Monitor replan.MonitorOptions
	OnPlan  func(PlanEvent)
	// ApplyWait bounds how long a config change waits for the control loop to
	// make it live (default 30s).
	ApplyWait time.Duration
}

// EmbeddedControl is the Control of `piccolo gateway` without --consul: the
// re-planner inside the gateway, over the config's static backends. It runs the
// same control loop as the cluster's re-planner (replan.Controller): the
// static backends are its members, the request path's arrival counters feed
// ObserveRates every tick, so a sustained rise of the rate is re-planned onto
// idle backends and a fall releases them; each decision is placed
// (placement.Place, static: round-robin sharing when the pool is short) and made live by
// publish: LiveSwitch.Apply, DAGRunner.SetSessions, Metrics.SetPlan.
//
// A config change (Apply, from the admin API or the file watcher) is first
// fused, planned and checked here (the config Pipeline: 422, nothing
// changes), then handed to the controller with SetConfig; Apply returns once
// the controller's plan for it is live, or, when that fails, hands the
// controller the previous config back and returns the error.
type EmbeddedControl struct {
	pipe    Pipeline
	metrics *metrics.Metrics
	log     *zap.Logger
	live    dataplane.LiveOptions
	ctx     context.Context
	stop    context.CancelFunc // ends the control loop
	ctl     *replan.Controller
	rates   *arrivals
	wait    time.Duration
	onPlan  func(PlanEvent)
	first   chan error // the first decision's outcome, for StartEmbedded

	sw     *dataplane.LiveSwitch // set by the first publish, before StartEmbedded returns
	served atomic.Pointer[api.Config]

	mu      sync.Mutex // guards the fields below
	exec    *gateway.DAGRunner
	known   map[string]api.Backend // every backend a config named, by id
	pending *pendingChange
	started bool
}

// pendingChange is a config change waiting in Apply for its plan.
type pendingChange struct {
	cfg   *api.Config
	cause string
	done  chan error // capacity 1
}

// StartEmbedded starts the control loop on cfg with cfg's static backends as
// members and returns once its first plan is live (models loaded, LiveSwitch
// serving). A planner that makes no plan fails with an error matching
// ErrNoPlan; a backend refusing the load fails too. The loop runs until ctx ends.
func StartEmbedded(ctx context.Context, cfg *api.Config, opts EmbeddedOptions) (*EmbeddedControl, error) {
	if opts.Planner == nil {
		return nil, errors.New("controlplane: StartEmbedded needs a Planner")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.ApplyWait <= 0 {
		opts.ApplyWait = 30 * time.Second
	}
	rates, err := newArrivals(time.Now(), opts.Monitor)
	if err != nil {
		return nil, err
	}
	pipe := Pipeline{Planner: opts.Planner, NoFusion: !opts.Fuse, Fusions: opts.Fusions}
	if cfg, err = pipe.Fuse(cfg); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	c := &EmbeddedControl{pipe: pipe, metrics: opts.Metrics, log: opts.Logger, live: opts.Live, ctx: ctx, stop: stop,
		rates: rates, wait: opts.ApplyWait, onPlan: opts.OnPlan, first: make(chan error, 1), known: map[string]api.Backend{}}
	c.noteBackends(cfg.Backends)
	co := opts.Loop
	if co.Tick == 0 {
		co.Tick = StaticTick
	}
	if co.SustainUp == 0 {
		co.SustainUp = StaticSustainUp
	}
	co.Plan = pipe.Plan // a rate re-plan enters the pipeline at its plan step
	co.Target, co.Logger = loopTarget{c}, opts.Logger
	if c.ctl, err = replan.New(cfg, placement.Members(cfg.Backends), co); err != nil {
		stop()
		return nil, err
	}
	rates.track(cfg)
	go func() { _ = c.ctl.Run(ctx) }()
	select {
	case err := <-c.first:
		if err != nil {
			stop()
			return nil, err
		}
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	opts.Metrics.SetMembership(cfg.Backends)
	go func() { _ = rates.mon.Run(ctx, replan.SystemClock{}) }()
	go c.feed(ctx, co.Tick)
	return c, nil
}

// feed hands the controller this gateway's measured rates every tick,
// expanded to every module of the served config (cluster.ExpandRates: each
// module's own measured rate, as the cluster's re-planner does with the
// gateways' reports).
func (c *EmbeddedControl) feed(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.ctl.ObserveRates("gateway", cluster.ExpandRates(c.served.Load(), c.rates.mon.Snapshot(now)))
		}
	}
}

// loopTarget is the control loop's replan.Target: a decision placed on the
// static pool (place) and made live on this gateway (publish); a failed one
// answers the change waiting for it (failed). Called from the loop's
// goroutine only.
type loopTarget struct{ c *EmbeddedControl }

func (t loopTarget) Place(plan *api.Plan, members []placement.Member, prev *api.Plan, opts placement.Options) (*api.Plan, placement.Shortfall, error) {
	return t.c.place(plan, members, prev, opts)
}
func (t loopTarget) Publish(r *replan.Replan) error    { return t.c.publish(r) }
func (t loopTarget) Failed(cfg *api.Config, err error) { t.c.failed(cfg, err) }

// place is the controller's placement for a static pool (placement.Options
// Static): packed (fractional machines share devices, stable), the
// fractions spread over the backends packing leaves idle; when the pool is
// too small for the plan, the round-robin
// placement a static gateway always had (machines share backends and run
// slower) instead of a plan scaled down.
func (c *EmbeddedControl) place(plan *api.Plan, members []placement.Member, prev *api.Plan, opts placement.Options) (*api.Plan, placement.Shortfall, error) {
	opts.Static, opts.Chains = true, c.live.Locality > 0 // a chain's fractions together where intermediates are held
	if c.sw != nil {
		c.sw.SetColocation(opts) // health re-placements keep the same pairs apart
	}
	placed, short, err := placement.Place(plan, members, prev, opts)
	if err == nil && short.Missing() > 0 {
		c.log.Warn("fewer backends than planned machines: some machines share a backend", zap.Int("shared_machines", short.Shared),
			zap.Int("devices_missing", short.Missing()))
	}
	return placed, short, err
}

// capacity is a placement's devices needed per hardware type: what the
// capacity metrics ask of the cluster.
func capacity(hw []placement.HardwareUse) map[string]int {
	out := make(map[string]int, len(hw))
	for _, h := range hw {
		out[h.Hardware] = h.Needed
	}
	return out
}

// publish is the control loop's Target.Publish: make r live on this gateway.
func (c *EmbeddedControl) publish(r *replan.Replan) error {
	c.mu.Lock()
	full := *r.Config
	full.Backends = c.backendsFor(r.Config, r.Plan)
	pending := c.pending
	c.mu.Unlock()
	cause := r.Cause
	if pending != nil && pending.cfg == r.Config {
		cause = pending.cause // "manual" for the admin API, "config" for a file
	}
	if c.sw == nil {
		sw, err := dataplane.NewLiveSwitch(c.ctx, &full, r.Plan, c.live)
		if err != nil {
			c.firstOutcome(err)
			return err
		}
		// Static backends: health checks, and an ejected backend's share re-placed
		// on the others (dataplane/replace.go) until the next plan.
		sw.ReplaceOnEjection()
		c.sw = sw
	} else if err := c.sw.Apply(c.ctx, &full, r.Plan); err != nil {
		return fmt.Errorf("place the new plan: %w", err)
	}
	live := time.Now()
	old := c.served.Swap(r.Config)
	c.mu.Lock()
	exec := c.exec
	if pending != nil && pending == c.pending && pending.cfg == r.Config {
		c.pending = nil
	} else {
		pending = nil
	}
	c.mu.Unlock()
	if old != r.Config {
		c.rates.track(r.Config)
		// The runner knows every session of the new config before the DAGRunner
		// serves them; a session removed is still served by the draining runner
		// for requests that started before.
		if exec != nil && old != nil {
			if err := exec.SetSessions(r.Config.Sessions); err != nil {
				c.log.Error("serve the new sessions", zap.Error(err)) // cannot happen for a valid config
			}
			c.metrics.SetDAGRunner(exec)
		}
	}
	if err := c.metrics.SetPlan(r.Plan, cause, r.PlanTook+r.PlaceTook); err != nil {
		c.log.Warn("plan metrics", zap.Error(err))
	}
	c.metrics.SetMembership(full.Backends)
	c.metrics.SetCapacity(capacity(r.Shortfall.Hardware))
	c.log.Info("new plan live", zap.String("cause", cause), zap.Float64("plan_cost", r.Plan.TotalCost),
		zap.Duration("planner_runtime", r.PlanTook), zap.Duration("since_trigger", live.Sub(r.Trigger)),
		zap.Strings("backends", placedOn(r.Plan)))
	if pending != nil {
		pending.done <- nil
	}
	c.firstOutcome(nil)
	if c.onPlan != nil {
		c.onPlan(PlanEvent{Cause: cause, Trigger: r.Trigger, Live: live, Plan: r.Plan})
	}
	return nil
}

// firstOutcome tells StartEmbedded how the first decision went (once).
func (c *EmbeddedControl) firstOutcome(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started = err == nil
		select {
		case c.first <- err:
		default:
		}
	}
}

// failed is the control loop's Target.Failed: a change waiting for cfg gets the error;
// before the first plan, StartEmbedded does.
func (c *EmbeddedControl) failed(cfg *api.Config, err error) {
	c.firstOutcome(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pending; p != nil && p.cfg == cfg {
		c.pending = nil
		p.done <- err
	}
}

// backendsFor lists cfg's backends and, after them, every other backend
// known that plan names (a plan placed on members a newer config dropped).
// Call with c.mu held.
func (c *EmbeddedControl) backendsFor(cfg *api.Config, plan *api.Plan) []api.Backend {
	out := append([]api.Backend(nil), cfg.Backends...)
	have := map[string]bool{}
	for _, b := range out {
		have[b.ID] = true
	}
	for _, id := range placedOn(plan) {
		if b, ok := c.known[id]; ok && !have[id] {
			out = append(out, b)
			have[id] = true
		}
	}
	return out
}

func (c *EmbeddedControl) noteBackends(bs []api.Backend) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range bs {
		c.known[b.ID] = b
	}
}

// Apply is an OnConfig, the config route of a gateway without Consul, step
// by step as docs/architecture.md ("The config path") numbers it. It runs
// on ConfigStore.Update's goroutine (step 1, the entry) and returns once the
// change is live, or with the error after the rollback.
func (c *EmbeddedControl) Apply(ctx context.Context, cfg *api.Config, cause string) error {
	prev := c.served.Load()
	// 2. Fuse.
	cfg, err := c.pipe.Fuse(cfg)
	if err != nil {
		return err
	}
	// 3–4. Plan and check, at the rates the controller plans at: a change
	// that cannot be planned is refused here (422) and nothing changes.
	planned, err := c.planChange(cfg, prev)
	if err != nil {
		return err
	}
	// 5. Hand over to the control loop, which places (6) and publishes (7)
	// it through loopTarget without planning again.
	p := c.handOver(cfg, prev, planned, cause)
	// Wait for 7; on failure or timeout, roll back.
	if err := c.await(ctx, p); err != nil {
		return c.rollback(p, prev, err)
	}
	return nil
}

// handOver registers cfg as the change waiting for its plan, then gives
// the controller the new members (when the backends changed) and the
// checked plan (Controller.SetPlanned).
func (c *EmbeddedControl) handOver(cfg, prev *api.Config, planned *replan.Planned, cause string) *pendingChange {
	p := &pendingChange{cfg: cfg, cause: cause, done: make(chan error, 1)}
	c.noteBackends(cfg.Backends)
	c.mu.Lock()
	c.pending = p
	c.mu.Unlock()
	if !sameBackends(prev.Backends, cfg.Backends) {
		c.ctl.SetMembers(placement.Members(cfg.Backends))
	}
	c.ctl.SetPlanned(cfg, planned)
	return p
}

// await waits until p's plan is live (publish answers it), its decision
// failed (failed answers it), ctx ends or ApplyWait passes.
func (c *EmbeddedControl) await(ctx context.Context, p *pendingChange) error {
	timeout := time.NewTimer(c.wait)
	defer timeout.Stop()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		return fmt.Errorf("no plan for the change went live within %v", c.wait)
	}
}

// rollback is the one way back from a change that did not go live: the
// controller is handed the served config prev (and its members) again, so
// it plans prev anew (the same plan: nothing is swapped), and err is
// returned; the ConfigStore then keeps prev's version. A change that went
// live meanwhile (its plan published after the wait ended) is kept: nil.
func (c *EmbeddedControl) rollback(p *pendingChange, prev *api.Config, err error) error {
	c.mu.Lock()
	if c.pending == p {
		c.pending = nil
	}
	c.mu.Unlock()
	if c.served.Load() == p.cfg {
		return nil
	}
	if !sameBackends(prev.Backends, p.cfg.Backends) {
		c.ctl.SetMembers(placement.Members(prev.Backends))
	}
	c.ctl.SetConfig(prev)
	return err
}

// planChange is the pipeline's plan and check steps for cfg, a change of the
// served config prev: planned at the rates the controller plans at
// (PlanningRates: measured rates stay in use for modules the change leaves
// alone) on the hardware the backends have, as the controller plans, so a
// change only an absent type could serve is refused here (422). A session
// that only fails at lowered measured rates is checked at the config's rates,
// as the controller's fall-back would plan it; that plan is then handed over
// at the config's rates and the controller plans at its own.
func (c *EmbeddedControl) planChange(cfg, prev *api.Config) (*replan.Planned, error) {
	try := func(rates map[replan.ModuleKey]float64) (*replan.Planned, error) {
		start := time.Now()
		plan, err := c.pipe.Plan(replan.WithRates(cfg, rates)) // serving.Plan plans for the types cfg.Backends have
		if plan == nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		if err := serving.Check(plan, cfg, c.sw.Plan(), prev); err != nil {
			return nil, err
		}
		return &replan.Planned{Plan: plan, Err: err, Rates: rates, Took: time.Since(start)}, nil
	}
	rates := c.ctl.PlanningRates(cfg)
	planned, err := try(rates)
	if decl := replan.Declared(cfg); err != nil && !maps.Equal(rates, decl) {
		planned, err = try(decl)
	}
	if err == nil {
		return planned, nil
	}
	var absent []string
	present := serving.Hardware(cfg.Backends)
	for _, h := range cfg.Hardware {
		if len(present) > 0 && !present[h.Name] {
			absent = append(absent, fmt.Sprintf("%q", h.Name))
		}
	}
	if len(absent) > 0 {
		return nil, fmt.Errorf("%w (planned on the backends' hardware only: no backend has hardware %s)", err, strings.Join(absent, ", "))
	}
	return nil, err
}

func sameBackends(a, b []api.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Hardware != b[i].Hardware || a[i].Address != b[i].Address {
			return false
		}
	}
	return true
}

// placedOn lists the backend ids plan places on, sorted.
func placedOn(plan *api.Plan) []string { return slices.Sorted(plan.Backends()) }

// Controller is the control loop (its Status: the last decision, the
// measured rates, the counts by cause).
func (c *EmbeddedControl) Controller() *replan.Controller { return c.ctl }

// LiveSwitch implements Control.
func (c *EmbeddedControl) LiveSwitch() *dataplane.LiveSwitch { return c.sw }

// Runner implements Control: the live switch.
func (c *EmbeddedControl) Runner() gateway.ModuleRunner {
	return c.sw
}

// ServedConfig implements Control: the config of the live plan.
func (c *EmbeddedControl) ServedConfig() *api.Config { return c.served.Load() }

// Attach implements Control. Call it before the ConfigStore's first Update.
func (c *EmbeddedControl) Attach(exec *gateway.DAGRunner, _ *ConfigStore) {
	c.mu.Lock()
	c.exec = exec
	c.mu.Unlock()
	exec.ObserveArrivals(c.rates) // the control loop's rate monitor
	c.metrics.SetDAGRunner(exec)
}

// Members implements Control: nil, the admin API lists the config's backends.
func (c *EmbeddedControl) Members() func() BackendView { return nil }

// StepDown implements Control: it ends the control loop (nothing is shared
// beyond this process, so there is nothing to wait for).
func (c *EmbeddedControl) StepDown(time.Duration) { c.stop() }
