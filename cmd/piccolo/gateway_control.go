package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/scheduler/control"
)

// consulControl is the embedded control plane of `piccolo gateway --consul`
// (docs/control-plane.md, "Wiring"): Consul membership → Controller.SetMembers;
// a RateMonitor counted on the request path → Controller.ObserveRates every
// second; Controller.Publish → LiveSwitch.Apply + Metrics.SetPlan. Config
// changes (admin API, file watcher) are applied synchronously by
// gateway.EmbeddedControl (so a refused change answers 422 and changes nothing)
// and then handed to Controller.SetConfig, which re-places the accepted plan
// on the live members.
//
// Goroutines: the membership loop (watch), the rate loop (report), the
// controller's Run (publish), the ConfigStore's Update (onConfig); the request
// path only reads counters through an atomic pointer.
type consulControl struct {
	log     *zap.Logger
	metrics *gateway.Metrics
	opts    gateway.LiveOptions
	ctx     context.Context
	onPlan  func(planEvent) // tests: every plan made live

	mon      *control.RateMonitor
	counters atomic.Pointer[map[string]map[string]*control.Counter] // session → source module
	base     atomic.Pointer[api.Config]                             // running config, without backends
	ctl      *control.Controller

	mu    sync.Mutex // guards known, snap, sw (publish, watch, admin)
	known map[string]api.Backend
	snap  membership.Snapshot
	sw    *gateway.LiveSwitch
	first chan struct{} // closed once the first plan is live
}

// planEvent is one plan made live by the control plane: what caused it, when
// the cause was seen (Trigger) and when the new dispatch table was live.
type planEvent struct {
	Cause   string
	Trigger time.Time
	Live    time.Time
	Plan    *api.Plan
}

// startConsulControl waits for Consul's first membership with at least one
// backend, starts the controller, and returns once its first plan is live
// (cc.sw serves it). Errors: Consul unreachable before any member is seen is
// not one (the wait continues until ctx ends, logging why); a planner or
// placement failure on the first plan is.
func startConsulControl(ctx context.Context, o *gatewayOptions, cfg *api.Config, metrics *gateway.Metrics, log *zap.Logger,
	live gateway.LiveOptions, planner gateway.Planner) (*consulControl, error) {
	w, err := membership.NewConsul(o.consul, membership.ConsulOptions{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--consul %s: %w", o.consul, err)
	}
	mon, err := control.NewRateMonitor(time.Now(), o.monitor)
	if err != nil {
		return nil, err
	}
	cc := &consulControl{log: log, metrics: metrics, opts: live, ctx: ctx, onPlan: o.onPlan, mon: mon,
		known: map[string]api.Backend{}, first: make(chan struct{})}
	cc.base.Store(cfg)
	cc.setCounters(cfg)

	updates := membership.Updates(ctx, w)
	var snap membership.Snapshot
	warned := false
	for len(snap.Members) == 0 {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for backends in Consul at %s: %w", o.consul, ctx.Err())
		case s, ok := <-updates:
			if !ok {
				return nil, fmt.Errorf("--consul %s: the membership watch ended", o.consul)
			}
			snap = s
		}
		if len(snap.Members) == 0 && !warned {
			log.Warn("no backends in Consul yet; waiting for one to register", zap.String("consul", o.consul),
				zap.Bool("stale", snap.Stale), zap.Error(snap.Err))
			warned = true
		}
	}
	cc.noteSnapshot(snap)

	copts := o.control
	copts.Plan = planner
	copts.Publish = cc.publish
	if copts.Logger == nil {
		copts.Logger = log
	}
	if cc.ctl, err = control.New(cfg, members(snap), copts); err != nil {
		return nil, err
	}
	go func() { _ = mon.Run(ctx, control.SystemClock{}) }()
	go func() { _ = cc.ctl.Run(ctx) }()
	for {
		select {
		case <-cc.first:
			go cc.watch(ctx, updates, snap)
			go cc.report(ctx)
			return cc, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
			if st := cc.ctl.Status(); st.Err != "" {
				return nil, fmt.Errorf("first plan: %s", st.Err)
			}
		}
	}
}

func members(s membership.Snapshot) []control.Member {
	out := make([]control.Member, len(s.Members))
	for i, m := range s.Members {
		out[i] = control.Member{ID: m.ID, Hardware: m.Hardware}
	}
	return out
}

// noteSnapshot records a fresh snapshot: its members' addresses join the known
// ones (a backend that left stays known, so a plan placed just before it left
// still resolves while the next one is made).
func (cc *consulControl) noteSnapshot(s membership.Snapshot) {
	cc.mu.Lock()
	cc.snap = s
	for _, b := range s.Backends() {
		cc.known[b.ID] = b
	}
	cc.mu.Unlock()
	cc.metrics.SetMembership(s.Backends())
	cc.metrics.SetMembershipStale(false)
}

// watch hands membership changes to the controller. A Stale snapshot keeps the
// last members (serving continues on them) and sets piccolo_membership_stale.
func (cc *consulControl) watch(ctx context.Context, updates <-chan membership.Snapshot, last membership.Snapshot) {
	stale := false
	for s := range updates {
		if s.Stale {
			if !stale {
				cc.log.Warn("membership source unreachable: serving the last members", zap.Int("members", len(last.Members)),
					zap.Error(s.Err))
			}
			stale = true
			cc.metrics.SetMembershipStale(true)
			continue
		}
		if stale {
			cc.log.Info("membership source back", zap.Int("members", len(s.Members)))
			stale = false
		}
		cc.noteSnapshot(s)
		if !s.SameMembers(last) {
			cc.ctl.SetMembers(members(s))
		}
		last = s
	}
}

// report hands the measured rates to the controller every second.
func (cc *consulControl) report(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cc.ctl.ObserveRates("", expandRates(cc.base.Load(), cc.mon.Snapshot(now)))
		}
	}
}

// setCounters resolves a Counter per session source module of cfg.
func (cc *consulControl) setCounters(cfg *api.Config) {
	m := map[string]map[string]*control.Counter{}
	for _, s := range cfg.Sessions {
		m[s.Name] = map[string]*control.Counter{}
		for _, mod := range s.Modules {
			if len(mod.After) == 0 {
				m[s.Name][mod.Name] = cc.mon.Handle(s.Name, mod.Name)
			}
		}
	}
	cc.counters.Store(&m)
}

// expandRates turns the measured request rates of each session's source modules
// into rates for every module: a module's rate is the session's measured
// request rate times its configured rate over the sources' configured rate, so a
// fan-out module keeps its configured ratio.
func expandRates(cfg *api.Config, s control.Snapshot) control.Snapshot {
	measured := map[string]control.ModuleRate{}
	for _, r := range s.Rates {
		if m, ok := measured[r.Session]; !ok || r.Envelope > m.Envelope {
			measured[r.Session] = r
		}
	}
	out := control.Snapshot{At: s.At, Windows: s.Windows}
	for _, sess := range cfg.Sessions {
		src, ok := measured[sess.Name]
		if !ok {
			continue
		}
		var srcRate float64
		for _, m := range sess.Modules {
			if len(m.After) == 0 {
				srcRate = max(srcRate, m.Rate)
			}
		}
		if srcRate <= 0 {
			continue
		}
		for _, m := range sess.Modules {
			f := m.Rate / srcRate
			r := control.ModuleRate{Session: sess.Name, Module: m.Name, Envelope: src.Envelope * f, Windows: make([]float64, len(src.Windows))}
			for i, w := range src.Windows {
				r.Windows[i] = w * f
			}
			out.Rates = append(out.Rates, r)
		}
	}
	return out
}

// withBackends is cfg with Backends = every backend seen in Consul (the ids a
// placed plan may name).
func (cc *consulControl) withBackends(cfg *api.Config) *api.Config {
	c := *cfg
	cc.mu.Lock()
	c.Backends = make([]api.Backend, 0, len(cc.known))
	for _, m := range cc.snap.Members { // live ones first, in id order
		c.Backends = append(c.Backends, cc.known[m.ID])
	}
	for id, b := range cc.known {
		if _, live := cc.snap.Member(id); !live {
			c.Backends = append(c.Backends, b)
		}
	}
	cc.mu.Unlock()
	return &c
}

// publish is the controller's Publish: make the placed plan live.
func (cc *consulControl) publish(r *control.Replan) error {
	base := cc.base.Load()
	if err := sameSessions(base, r.Plan); err != nil {
		return fmt.Errorf("the config changed while planning (%w); re-planning", err)
	}
	cfg := cc.withBackends(base)
	cc.mu.Lock()
	sw := cc.sw
	cc.mu.Unlock()
	switch {
	case sw == nil:
		s, err := gateway.NewLiveSwitch(cc.ctx, cfg, r.Plan, cc.opts)
		if err != nil {
			return err
		}
		cc.mu.Lock()
		cc.sw = s
		cc.mu.Unlock()
		defer close(cc.first)
	case r.Cause == control.CauseConfig && samePlaced(sw.Plan(), r.Plan):
		// EmbeddedControl made this config live already, placed the same way.
	default:
		if err := sw.Apply(cc.ctx, cfg, r.Plan); err != nil {
			return err
		}
	}
	live := time.Now()
	cause := r.Cause
	if err := cc.metrics.SetPlan(r.Plan, cause, r.PlanTook+r.PlaceTook); err != nil {
		cc.log.Warn("plan metrics", zap.Error(err))
	}
	cc.log.Info("new plan live", zap.String("cause", cause), zap.Float64("plan_cost", r.Plan.TotalCost),
		zap.Duration("since_trigger", live.Sub(r.Trigger)), zap.Int("devices_missing", r.Shortfall.Missing()))
	if cc.onPlan != nil {
		cc.onPlan(planEvent{Cause: cause, Trigger: r.Trigger, Live: live, Plan: r.Plan})
	}
	return nil
}

// onConfig is the ConfigStore's OnConfig with Consul: EmbeddedControl applies
// the change (refusing what cannot be planned), then the controller learns it.
func (cc *consulControl) onConfig(ec *gateway.EmbeddedControl) gateway.OnConfig {
	return func(ctx context.Context, cfg *api.Config, cause string) error {
		if err := ec.Apply(ctx, cc.withBackends(cfg), cause); err != nil {
			return err
		}
		cc.base.Store(cfg)
		cc.setCounters(cfg)
		cc.ctl.SetConfig(cfg)
		return nil
	}
}

// backends is the admin API's view of the Consul membership.
func (cc *consulControl) backends() gateway.BackendView {
	cc.mu.Lock()
	s := cc.snap
	cc.mu.Unlock()
	v := gateway.BackendView{Source: "consul", Stale: s.Stale, At: s.At}
	if s.Err != nil {
		v.Error = s.Err.Error()
	}
	for _, m := range s.Members {
		v.Backends = append(v.Backends, gateway.BackendInfo{ID: m.ID, Address: m.Address, Hardware: m.Hardware, Price: m.Price,
			GPU: m.GPU, GPUMemoryBytes: m.GPUMemoryBytes, Models: m.Models})
	}
	return v
}

func sameSessions(cfg *api.Config, p *api.Plan) error {
	if len(cfg.Sessions) != len(p.Sessions) {
		return fmt.Errorf("%d sessions in the config, %d in the plan", len(cfg.Sessions), len(p.Sessions))
	}
	for _, sp := range p.Sessions {
		if _, ok := cfg.Session(sp.Name); !ok {
			return fmt.Errorf("session %q is no longer in the config", sp.Name)
		}
	}
	return nil
}

func samePlaced(a, b *api.Plan) bool {
	x, y := *a, *b
	x.RuntimeMs, y.RuntimeMs = 0, 0
	return reflect.DeepEqual(x, y)
}

// countingRunner is the LiveSwitch with the rate monitor's counters: the
// executor calls Estimate once per module per admitted-or-refused request, so a
// source module's Estimate counts one arrival (refused ones too: the rate is
// the demand). One atomic load and two map lookups; no lock, no allocation.
type countingRunner struct {
	*gateway.LiveSwitch
	cc *consulControl
}

var (
	_ gateway.ModuleRunner   = countingRunner{}
	_ gateway.MetadataSource = countingRunner{}
)

// Estimate implements gateway.ModuleRunner.
func (r countingRunner) Estimate(session, module string) time.Duration {
	if c := (*r.cc.counters.Load())[session][module]; c != nil {
		c.Add(1)
	}
	return r.LiveSwitch.Estimate(session, module)
}

var errNoConsul = errors.New("membership consul needs --consul ADDR (the Consul agent's HTTP address host:port)")
