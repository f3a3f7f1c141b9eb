package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// ReplannerOptions configure a re-planner candidate. ID, Seed and Plan are required.
type ReplannerOptions struct {
	// ID names the candidate (unique in the cluster; DefaultID()).
	ID string
	// Seed is the config written to Consul when the cluster has none yet and
	// this candidate has seen none there (the candidate's -c files). Once
	// Consul holds a config, that one is planned. A candidate that saw one
	// (it watches the key, leading or not) seeds with the last it saw, so a
	// Consul that lost its KV (a dev agent restarted) gets the operators'
	// changes back rather than the files. (So deleting the key by hand to go
	// back to the files takes restarting every candidate.)
	Seed *api.Config
	// Plan is the planner (planner.Plan or simulate.PlanForBursts with options).
	Plan func(*api.Config) (*api.Plan, error)
	// Members is the backend membership (default: membership.NewConsul on the
	// same agent).
	Members membership.Membership
	// Loop tunes the control loop; Plan, Target and Logger are set here.
	// A Loop.Calibration that is a Calibration (a gateway's
	// calibrate.Estimator) is followed with every gateway's calibration in
	// Consul KV while this candidate leads (Followed): drift, planning and
	// co-location read the merge.
	Loop replan.Options
	// TTL is the candidate's heartbeat TTL (default DefaultTTL).
	TTL time.Duration
	// Logger (default none).
	Logger *zap.Logger
}

// Replanner is a candidate for the cluster's re-planner: Run campaigns, and
// while elected runs the control loop (replan.Controller) on the config in
// Consul, the Consul membership and the gateways' reported rates, publishing
// each decision as a Record. Leading may be called from any goroutine.
type Replanner struct {
	c       *Client
	o       ReplannerOptions
	leading atomic.Bool
	seen    atomic.Pointer[api.Config] // the last valid config seen in Consul
}

// NewReplanner checks o and returns a candidate; Run starts it.
func NewReplanner(c *Client, o ReplannerOptions) (*Replanner, error) {
	if o.ID == "" || o.Seed == nil || o.Plan == nil {
		return nil, errors.New("cluster: a scheduler needs an ID, a seed config and a planner")
	}
	if o.TTL != 0 && o.TTL < time.Second {
		// Checked here, not only in Campaign: Run's error is the candidate's
		// end, and a gateway running one would wait for a plan forever.
		return nil, fmt.Errorf("cluster: candidate TTL %v: must be at least 1s (Consul's TTL check resolution)", o.TTL)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Members == nil {
		m, err := membership.NewConsul(c.addr, membership.ConsulOptions{Logger: o.Logger, Auth: c.auth, BackendToken: c.backendToken})
		if err != nil {
			return nil, err
		}
		o.Members = m
	}
	return &Replanner{c: c, o: o}, nil
}

// Run campaigns until ctx ends (Client.Campaign), watching the config key
// meanwhile (the seed after a loss of Consul's KV); returns nil then.
func (s *Replanner) Run(ctx context.Context) error {
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = s.c.WatchKey(wctx, s.c.ConfigKey(), func(ev KeyEvent) {
			if ev.Absent() {
				return // keep the last seen
			}
			if cfg, err := DecodeConfig(s.c.ConfigKey(), ev.Value); err == nil {
				s.seen.Store(cfg)
			}
		})
	}()
	defer func() { stop(); <-watched }()
	return s.c.Campaign(ctx, s.o.ID, s.o.TTL, s.lead)
}

// Leading reports whether this candidate is the cluster's re-planner now.
func (s *Replanner) Leading() bool { return s.leading.Load() }

// term is one leadership: the state of the elected re-planner.
type term struct {
	s   *Replanner
	l   *Leadership
	log *zap.Logger

	mu      sync.Mutex // guards the fields below
	known   map[string]api.Backend
	snap    membership.Snapshot
	index   map[*api.Config]uint64 // config → its ModifyIndex in Consul
	cfg     *api.Config            // latest config from Consul (for expanding rates)
	version uint64
}

// lead is the elected re-planner's work, until ctx ends.
func (s *Replanner) lead(ctx context.Context, l *Leadership) {
	s.leading.Store(true)
	defer s.leading.Store(false)
	t := &term{s: s, l: l, log: s.o.Logger.With(zap.String("scheduler", s.o.ID)), known: map[string]api.Backend{},
		index: map[*api.Config]uint64{}}
	if err := t.run(ctx); err != nil && ctx.Err() == nil {
		t.log.Error("scheduler: stepping down", zap.Error(err))
	}
}

func (t *term) run(ctx context.Context) error {
	cfg, idx, err := t.s.c.Config(ctx)
	if err != nil {
		return err
	}
	if cfg == nil {
		seed, from := t.s.o.Seed, "this scheduler's files"
		if seen := t.s.seen.Load(); seen != nil {
			seed, from = seen, "the last config this scheduler saw in Consul"
		}
		if idx, err = t.s.c.PutConfig(ctx, seed, 0); err != nil {
			return fmt.Errorf("seed the cluster's config: %w", err)
		}
		cfg = WithoutBackends(seed)
		t.log.Info("seeded the cluster's config", zap.String("from", from), zap.Uint64("index", idx))
	}
	if prev, _, err := t.s.c.Plan(ctx); err == nil && prev != nil {
		t.version = prev.Version
	}
	t.index[cfg] = idx
	t.cfg = cfg

	updates := membership.Updates(ctx, t.s.o.Members)
	var snap membership.Snapshot
	warned := false
	for len(snap.Members) == 0 {
		select {
		case <-ctx.Done():
			return nil
		case s, ok := <-updates:
			if !ok {
				return errors.New("the membership watch ended")
			}
			snap = s
		}
		if len(snap.Members) == 0 && !warned {
			t.log.Warn("no backends in Consul yet; waiting for one to register", zap.Bool("stale", snap.Stale), zap.Error(snap.Err))
			warned = true
		}
	}
	t.noteSnapshot(snap)

	copts := t.s.o.Loop
	var followed *Followed
	if own, ok := copts.Calibration.(Calibration); ok {
		followed = NewFollowed(own, t.s.c, t.log)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := followed.Refresh(rctx)
		cancel()
		if err != nil {
			t.log.Warn("calibrations not read from Consul; planning from this scheduler's own until they are", zap.Error(err))
		}
		copts.Calibration = followed
	}
	copts.Plan = t.s.o.Plan
	copts.Target = replan.Publisher(func(r *replan.Replan) error { return t.publish(ctx, r) })
	copts.Logger = t.log
	ctl, err := replan.New(cfg, members(snap), copts)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(3)
	if followed != nil {
		wg.Add(1)
		go func() { defer wg.Done(); followed.Follow(ctx) }()
	}
	go func() { defer wg.Done(); _ = ctl.Run(ctx) }()
	go func() { defer wg.Done(); t.watchMembers(ctx, ctl, updates, snap) }()
	go func() { defer wg.Done(); t.watchConfig(ctx, ctl, idx) }()
	t.readRates(ctx, ctl)
	wg.Wait()
	return nil
}

// publish is the controller's Publish: the placed plan and its config, with
// every backend it may name, as one Record.
func (t *term) publish(ctx context.Context, r *replan.Replan) error {
	t.mu.Lock()
	idx := t.index[r.Config]
	full := *r.Config
	full.Backends = make([]api.Backend, 0, len(t.known))
	for _, m := range t.snap.Members { // live ones first, in id order
		full.Backends = append(full.Backends, t.known[m.ID])
	}
	for id, b := range t.known { // and the ones that left, which a plan placed just before may name
		if _, live := t.snap.Member(id); !live {
			full.Backends = append(full.Backends, b)
		}
	}
	t.version++
	version := t.version
	t.mu.Unlock()
	y, err := api.EncodeYAML(&full)
	if err != nil {
		return err
	}
	rec := &Record{Version: version, Leader: t.l.ID(), Cause: r.Cause, Trigger: r.Trigger, At: time.Now(), ConfigIndex: idx,
		Config: string(y), Plan: r.Plan, PlanTookMs: float64(r.PlanTook+r.PlaceTook) / 1e6, DevicesMissing: r.Shortfall.Missing(), Capacity: r.Shortfall.Hardware}
	if err := t.l.Publish(ctx, rec); err != nil {
		return err
	}
	t.mu.Lock()
	for c, i := range t.index { // the controller never goes back to an older config
		if i < idx {
			delete(t.index, c)
		}
	}
	t.mu.Unlock()
	return nil
}

func (t *term) noteSnapshot(s membership.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.snap = s
	for _, b := range s.Backends() {
		t.known[b.ID] = b
	}
}

// watchMembers hands membership changes to the controller; a Stale snapshot
// (Consul unreachable) keeps the last members.
func (t *term) watchMembers(ctx context.Context, ctl *replan.Controller, updates <-chan membership.Snapshot, last membership.Snapshot) {
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-updates:
			if !ok {
				return
			}
			if s.Stale {
				continue
			}
			t.noteSnapshot(s)
			if !s.SameMembers(last) {
				ctl.SetMembers(members(s))
			}
			last = s
		}
	}
}

// watchConfig hands each new config in Consul to the controller: with the plan
// the gateway that stored it made and checked (ConfigPlanFor; SetPlanned, so
// a change is planned once in the cluster), else to be planned here
// (SetConfig). The handed plan was made at the config's rates; the controller
// plans again only when measured rates are in use for modules the change
// left alone (replan.Controller.SetPlanned). A value the loader refuses
// (written by hand, or by an older version) is logged and the running config
// stays.
func (t *term) watchConfig(ctx context.Context, ctl *replan.Controller, have uint64) {
	_ = t.s.c.WatchKey(ctx, t.s.c.ConfigKey(), func(ev KeyEvent) {
		if ev.Absent() || ev.Index == have {
			return
		}
		cfg, err := DecodeConfig(t.s.c.ConfigKey(), ev.Value)
		if err != nil {
			t.log.Error("the config in Consul is not valid: keeping the running one", zap.Error(err))
			return
		}
		have = ev.Index
		t.mu.Lock()
		t.index[cfg] = ev.Index
		t.cfg = cfg
		t.mu.Unlock()
		cp := t.s.c.ConfigPlanFor(ctx, ev.Index)
		if cp == nil {
			ctl.SetConfig(cfg)
			return
		}
		var planErr error
		if cp.Error != "" {
			planErr = errors.New(cp.Error)
		}
		ctl.SetPlanned(cfg, &replan.Planned{Plan: cp.Plan, Err: planErr, Rates: replan.Declared(cfg),
			Took: time.Duration(cp.TookMs * float64(time.Millisecond))})
	})
}

// ratesEvery is how often the leader reads the gateways' rate reports: as often
// as a gateway writes one.
const ratesEvery = time.Second

// readRates reads the gateways' reports every ratesEvery and hands each one
// that changed since the last read to the controller, stamped with this
// scheduler's clock (so gateways' clocks do not matter) and expanded to every
// module of the config (ExpandRates: a module's own measured rate, or its
// sources' scaled by the configured ratio).
func (t *term) readRates(ctx context.Context, ctl *replan.Controller) {
	tick := time.NewTicker(ratesEvery)
	defer tick.Stop()
	seen := map[string]uint64{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			rs, err := t.s.c.Rates(ctx)
			if err != nil && ctx.Err() == nil {
				t.log.Debug("read the gateways' rates", zap.Error(err))
			}
			t.mu.Lock()
			cfg := t.cfg
			t.mu.Unlock()
			for _, g := range rs {
				if seen[g.Gateway] == g.Index {
					continue
				}
				seen[g.Gateway] = g.Index
				g.Snapshot.At = now
				ctl.ObserveRates(g.Gateway, ExpandRates(cfg, g.Snapshot))
			}
		}
	}
}

func members(s membership.Snapshot) []placement.Member {
	out := make([]placement.Member, len(s.Members))
	for i, m := range s.Members {
		out[i] = placement.Member{ID: m.ID, Hardware: m.Hardware}
	}
	return out
}

// ExpandRates turns a gateway's measured rates (controlplane's arrivals:
// every module of each session, or from an older gateway its sources only)
// into rates for every module of cfg, each in req/s (items/s after a
// fan-out).
//
// A module with parents takes its own measured rate (Llama's input-dependent
// flow: a branch at the share of its parent's items that take it, a fan-out
// at the items its parent's items make), its RecentSpan divided by the
// items it measured per request when that is more than one, so that the
// controller judges a rise of its items as significant only as far as the
// requests they come from are (ModuleRate.Scaled's rule: f items from each
// request make a count f times as noisy as a Poisson count of f·n items),
// and by 1 + SCV more for a fan-out whose measured distribution varies
// (ModuleRate.FanOut: 0 or 12 objects an image make a count 12 times as
// noisy as a Poisson count of the same mean, not 3).
//
// A source, and a module without a measured rate, takes the session's
// measured request rate (the rate of its sources', by cfg, with the highest
// envelope: each counts every request) times its configured rate over the
// sources' configured rate, as every module did before the gateway counted
// each module.
//
// A module's own rate counts the items of admitted requests only; when the
// gateway reports refusals (replan.RefusedModule, the requests admission
// refused), each such rate is scaled by the session's demand over its
// admitted requests (at most 20), so that under overload every module is
// planned for the demand its sources are.
func ExpandRates(cfg *api.Config, s replan.RateSnapshot) replan.RateSnapshot {
	const maxDemandOverAdmitted = 20 // a session refusing nineteen in twenty counts as that
	measured := make(map[replan.ModuleKey]replan.ModuleRate, len(s.Rates))
	for _, r := range s.Rates {
		measured[replan.ModuleKey{Session: r.Session, Module: r.Module}] = r
	}
	out := replan.RateSnapshot{At: s.At, Horizon: s.Horizon}
	for _, sess := range cfg.Sessions {
		var (
			src     replan.ModuleRate
			found   bool
			srcRate float64
		)
		for _, m := range sess.Modules {
			if len(m.After) > 0 {
				continue
			}
			srcRate = max(srcRate, m.Rate)
			if r, ok := measured[replan.ModuleKey{Session: sess.Name, Module: m.Name}]; ok && (!found || r.Envelope > src.Envelope) {
				src, found = r, true
			}
		}
		// Under overload the modules after the sources see the admitted
		// requests' items only: scale them up to the demand by the share
		// admission refused (replan.RefusedModule), or a re-plan for the
		// sources' demand would plan them at what was admitted.
		up := 1.0
		if rf, ok := measured[replan.ModuleKey{Session: sess.Name, Module: replan.RefusedModule}]; ok && found && src.Mean > 0 && rf.Mean > 0 {
			up = src.Mean / max(src.Mean-rf.Mean, src.Mean/maxDemandOverAdmitted)
		}
		for _, m := range sess.Modules {
			if r, ok := measured[replan.ModuleKey{Session: sess.Name, Module: m.Name}]; ok && len(m.After) > 0 {
				if up > 1 {
					r = r.Scaled(up)
				}
				var perRequest float64 // items per request: measured, else declared
				switch {
				case found && src.Mean > 0:
					perRequest = r.Mean / src.Mean
				case srcRate > 0:
					perRequest = m.Rate / srcRate
				}
				// The items' count is a compound Poisson count: its variance
				// is perRequest × (1 + SCV) times a Poisson count's of the
				// same mean (SCV of the measured fan-out distribution; 0 for
				// a fixed count, 3 for 0 or 12 objects in three images of
				// four), so the span is divided by that.
				if d := perRequest * (1 + r.FanOut.SCV()); d > 1 {
					r.RecentSpan = time.Duration(float64(r.RecentSpan) / d)
				}
				out.Rates = append(out.Rates, r)
				continue
			}
			if !found || srcRate <= 0 {
				continue
			}
			r := src.Scaled(m.Rate / srcRate)
			r.Module = m.Name
			out.Rates = append(out.Rates, r)
		}
	}
	return out
}
