package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/control"
)

// Planner makes a plan for a config: scheduler.Plan, or PlanForServing (the
// serving planner of `piccolo gateway`). A plan may carry per-session
// errors (sessions it could not plan); err is for a config it could not plan at
// all. Called from ConfigStore.Update's goroutine (checking a change) and from
// the control loop's, one call at a time on each.
type Planner func(cfg *api.Config) (*api.Plan, error)

// Static mode's control loop timing (docs/control-plane.md, "Re-planning
// without Consul"). The rates are this gateway's own, handed to the controller
// every StaticTick, so a sustained rise is re-planned within 2 s: after a step
// to 2× the rate over the session's envelope window W (control.EnvelopeWindow)
// crosses planned×1.2 after 0.2 W and up to a 100 ms bucket of lag, stays
// above for StaticSustainUp, the next tick plans (PlanForServing:
// milliseconds, the burst simulation included) and the plan is live some
// milliseconds later: 0.8 s measured for a 700 ms window; within 2 s for
// windows up to about 5 s. The controller's 3 s default (kept with Consul,
// whose rates arrive every second through KV) would take about 3.5 s. The
// price of 500 ms: noise above the 20 % band for half a second re-plans up, to
// the envelope, where the plan then stays.
const (
	StaticTick      = 100 * time.Millisecond
	StaticSustainUp = 500 * time.Millisecond
)

// EmbeddedOptions configure StartEmbedded.
type EmbeddedOptions struct {
	Planner Planner
	Live    dataplane.LiveOptions
	Metrics *metrics.Metrics // optional
	Logger  *zap.Logger      // optional

	// Control tunes the control loop (Plan, Publish, Place, Failed and Logger
	// are set here; Tick and SustainUp default to StaticTick and
	// StaticSustainUp); Monitor the rate monitor. OnPlan, when set, is called
	// with every plan made live. Tests shorten the hysteresis with them.
	Control control.Options
	Monitor control.MonitorOptions
	OnPlan  func(PlanEvent)
	// ApplyWait bounds how long a config change waits for the control loop to
	// make it live (default 30s).
	ApplyWait time.Duration
}

// EmbeddedControl is the Control of `piccolo gateway` without --consul: the
// scheduler inside the gateway, over the config's static backends. It runs the
// same control loop as the cluster's scheduler (control.Controller): the
// static backends are its members, the request path's arrival counters feed
// ObserveRates every tick, so a sustained rise of the rate is re-planned onto
// idle backends and a fall releases them; each decision is placed
// (control.Place, round-robin sharing when the pool is short) and made live by
// publish: LiveSwitch.Apply, DAGRunner.SetSessions, Metrics.SetPlan.
//
// A config change (Apply, from the admin API or the file watcher) is first
// planned here to refuse what cannot be planned (PlanChange: 422, nothing
// changes), then handed to the controller with SetConfig; Apply returns once
// the controller's plan for it is live, or, when that fails, hands the
// controller the previous config back and returns the error.
type EmbeddedControl struct {
	planner Planner
	metrics *metrics.Metrics
	log     *zap.Logger
	live    dataplane.LiveOptions
	ctx     context.Context
	stop    context.CancelFunc // ends the control loop
	ctl     *control.Controller
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
	rates, err := newArrivals(opts.Monitor)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	c := &EmbeddedControl{planner: opts.Planner, metrics: opts.Metrics, log: opts.Logger, live: opts.Live, ctx: ctx, stop: stop,
		rates: rates, wait: opts.ApplyWait, onPlan: opts.OnPlan, first: make(chan error, 1), known: map[string]api.Backend{}}
	c.noteBackends(cfg.Backends)
	co := opts.Control
	if co.Tick == 0 {
		co.Tick = StaticTick
	}
	if co.SustainUp == 0 {
		co.SustainUp = StaticSustainUp
	}
	co.Plan = func(cfg *api.Config) (*api.Plan, error) {
		p, err := c.planner(cfg)
		if p == nil {
			if err == nil {
				err = errors.New("the planner returned no plan")
			}
			return nil, noPlanError{err}
		}
		return p, err
	}
	co.Publish, co.Place, co.Failed, co.Logger = c.publish, c.place, c.failed, opts.Logger
	if c.ctl, err = control.New(cfg, staticMembers(cfg.Backends), co); err != nil {
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
	go func() { _ = rates.mon.Run(ctx, control.SystemClock{}) }()
	go c.feed(ctx, co.Tick)
	return c, nil
}

// feed hands the controller this gateway's measured rates every tick,
// expanded from the source modules to every module (cluster.ExpandRates, as
// the cluster's scheduler does with the gateways' reports).
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

// place is the controller's placement for a static pool: control.Place
// (fractional machines packed, stable, idle backends left free); when the pool
// is too small for the plan, the round-robin placement a static gateway always
// had (dataplane.Place: machines share backends and run slower) instead of a
// plan scaled down.
func (c *EmbeddedControl) place(plan *api.Plan, members []control.Member, prev *api.Plan) (*api.Plan, control.Shortfall, error) {
	placed, short, err := control.Place(plan, members, prev)
	if err != nil || short.Missing() == 0 {
		return placed, short, err
	}
	rr, rshort, err := control.PlaceWith(plan, members, nil, control.PlaceOptions{RoundRobin: true})
	if err != nil {
		return nil, short, err
	}
	c.log.Warn("fewer backends than planned machines: some machines share a backend", zap.Int("shared_machines", rshort.Shared),
		zap.Int("devices_missing", short.Missing()))
	return rr, short, nil
}

// capacity is a placement's devices needed per hardware type: what the
// capacity metrics ask of the cluster.
func capacity(hw []control.HardwareUse) map[string]int {
	out := make(map[string]int, len(hw))
	for _, h := range hw {
		out[h.Hardware] = h.Needed
	}
	return out
}

// publish is the controller's Publish: make r live on this gateway.
func (c *EmbeddedControl) publish(r *control.Replan) error {
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

// failed is the controller's Failed: a change waiting for cfg gets the error;
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

// Apply is an OnConfig: refuse a change that cannot be planned (PlanChange),
// else hand it to the control loop and wait until its plan is live.
func (c *EmbeddedControl) Apply(ctx context.Context, cfg *api.Config, cause string) error {
	prev := c.served.Load()
	// Checked on the hardware the backends have, as the controller plans: a
	// change only an absent type could serve is refused here (422).
	present := map[string]bool{}
	for _, b := range cfg.Backends {
		present[b.Hardware] = true
	}
	onPresent := func(cfg *api.Config) (*api.Plan, error) { return c.planner(control.OnlyPresent(cfg, present)) }
	if _, err := PlanChange(onPresent, cfg, c.sw.Plan(), prev); err != nil {
		var absent []string
		for _, h := range cfg.Hardware {
			if !present[h.Name] {
				absent = append(absent, fmt.Sprintf("%q", h.Name))
			}
		}
		if len(absent) > 0 {
			return fmt.Errorf("%w (planned on the backends' hardware only: no backend has hardware %s)", err, strings.Join(absent, ", "))
		}
		return err
	}
	p := &pendingChange{cfg: cfg, cause: cause, done: make(chan error, 1)}
	c.noteBackends(cfg.Backends)
	c.mu.Lock()
	c.pending = p
	c.mu.Unlock()
	if !sameBackends(prev.Backends, cfg.Backends) {
		c.ctl.SetMembers(staticMembers(cfg.Backends))
	}
	c.ctl.SetConfig(cfg)
	timeout := time.NewTimer(c.wait)
	defer timeout.Stop()
	var err error
	select {
	case err = <-p.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout.C:
		err = fmt.Errorf("no plan for the change went live within %v", c.wait)
	}
	if err == nil {
		return nil
	}
	// Roll back: the controller plans the served config again (the same plan:
	// nothing is swapped) unless the change went live meanwhile.
	c.mu.Lock()
	if c.pending == p {
		c.pending = nil
	}
	c.mu.Unlock()
	if c.served.Load() == cfg {
		return nil
	}
	if !sameBackends(prev.Backends, cfg.Backends) {
		c.ctl.SetMembers(staticMembers(prev.Backends))
	}
	c.ctl.SetConfig(prev)
	return err
}

// staticMembers are a static backends list as the controller's members.
func staticMembers(bs []api.Backend) []control.Member {
	out := make([]control.Member, len(bs))
	for i, b := range bs {
		out[i] = control.Member{ID: b.ID, Hardware: b.Hardware}
	}
	return out
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
func placedOn(plan *api.Plan) []string {
	set := map[string]bool{}
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				for _, id := range g.Backends {
					set[id] = true
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Controller is the control loop (its Status: the last decision, the
// measured rates, the counts by cause).
func (c *EmbeddedControl) Controller() *control.Controller { return c.ctl }

// LiveSwitch implements Control.
func (c *EmbeddedControl) LiveSwitch() *dataplane.LiveSwitch { return c.sw }

// Runner implements Control: the live switch, counting each source module's
// arrivals for the control loop.
func (c *EmbeddedControl) Runner() gateway.ModuleRunner {
	return countingRunner{LiveSwitch: c.sw, a: c.rates}
}

// ServedConfig implements Control: the config of the live plan.
func (c *EmbeddedControl) ServedConfig() *api.Config { return c.served.Load() }

// Attach implements Control. Call it before the ConfigStore's first Update.
func (c *EmbeddedControl) Attach(exec *gateway.DAGRunner, _ *ConfigStore) {
	c.mu.Lock()
	c.exec = exec
	c.mu.Unlock()
	c.metrics.SetDAGRunner(exec)
}

// Members implements Control: nil, the admin API lists the config's backends.
func (c *EmbeddedControl) Members() func() BackendView { return nil }

// StepDown implements Control: it ends the control loop (nothing is shared
// beyond this process, so there is nothing to wait for).
func (c *EmbeddedControl) StepDown(time.Duration) { c.stop() }

// PlanChange plans cfg, a change of the config prevCfg served by the plan prev,
// and applies the rule a change must pass before it goes live: every session
// that the change adds or modifies, or that was planned before, must be
// planned; a session that failed before and is untouched does not refuse the
// change. The error names every refused session and why (the admin API
// answers 422); on success the plan is returned. Used by EmbeddedControl and
// by the cluster mode's gateways, which refuse a change before storing it.
func PlanChange(planner Planner, cfg *api.Config, prev *api.Plan, prevCfg *api.Config) (*api.Plan, error) {
	plan, err := planner(cfg)
	if plan == nil {
		if err == nil {
			err = errors.New("the planner returned no plan")
		}
		return nil, fmt.Errorf("plan: %w", err)
	}
	var bad []string
	for _, sp := range plan.Sessions {
		if sp.Error == "" {
			continue
		}
		if prev != nil && prevCfg != nil && wasFailing(prev, sp.Name) && !changed(prevCfg, cfg, sp.Name) {
			continue // failing before and untouched: not this change's fault
		}
		bad = append(bad, fmt.Sprintf("session %q cannot be planned: %s", sp.Name, sp.Error))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, errors.New(strings.Join(bad, "; "))
	}
	return plan, nil
}

func wasFailing(p *api.Plan, session string) bool {
	for _, sp := range p.Sessions {
		if sp.Name == session {
			return sp.Error != ""
		}
	}
	return false
}

// changed reports whether session differs between a and b (or is new in b).
// Sources (file and line) do not count.
func changed(a, b *api.Config, session string) bool {
	sa, okA := a.Session(session)
	sb, okB := b.Session(session)
	if !okA || !okB {
		return true
	}
	if sa.Name != sb.Name || sa.SLO != sb.SLO || len(sa.Modules) != len(sb.Modules) ||
		(sa.Accuracy == nil) != (sb.Accuracy == nil) || (sa.Accuracy != nil && *sa.Accuracy != *sb.Accuracy) {
		return true
	}
	sameVariant := func(x, y api.Variant) bool { return x.Model == y.Model && x.Accuracy == y.Accuracy }
	for i := range sa.Modules {
		ma, mb := sa.Modules[i], sb.Modules[i]
		if ma.Name != mb.Name || ma.Model != mb.Model || ma.Rate != mb.Rate || strings.Join(ma.After, ",") != strings.Join(mb.After, ",") ||
			!slices.EqualFunc(ma.Variants, mb.Variants, sameVariant) {
			return true
		}
	}
	return false
}
