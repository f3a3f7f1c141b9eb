package replan

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/placement"
)

// Re-plan causes, the values of Replan.Cause: the same nine as
// metrics.ReplanCauses (CausePeriodic is the control loop's periodic re-plan,
// CauseDrift a device's measured durations leaving the plan's profiles).
const (
	CauseInitial    = "initial"
	CauseRate       = "rate"
	CauseMembership = "membership"
	CauseConfig     = "config"
	CauseManual     = "manual"
	CausePeriodic   = "periodic"
	CauseDrift      = "drift"
	// CauseTune is a plan the Tuner scaled (Tune): placed and published
	// without running the planner.
	CauseTune = "tune"
	// CauseColocation is two models the current placement packs on one
	// device measured slowing each other beyond DriftThreshold: the plan is
	// made again and placed with the pair kept apart (placement.Options
	// Slowdowns; docs/calibration.md, "Co-location").
	CauseColocation = "colocation"
	// CauseFanOut is a fan-out module's measured distribution needing
	// another number of batches than the one planned (fanout.go).
	CauseFanOut = "fanout"
)

// DefaultUpSignificance is Options.UpSignificance's default: 4 standard
// deviations of a Poisson count.
const DefaultUpSignificance = 4.0

// Replan is one decision of the control loop, handed to Options.Publish.
// Immutable: Publish may keep it.
type Replan struct {
	// Cause is one of the Cause constants.
	Cause string
	// Plan is the placed plan to serve: one backend id per machine.
	Plan *api.Plan
	// Config is the config Plan was made for (the one last handed to New or
	// SetConfig before this decision); a publisher that serves the plan with
	// its sessions must take them from here, not from a newer SetConfig.
	Config *api.Config
	// Unplaced is the planner's output before placement (Backends empty).
	Unplaced *api.Plan
	// Shortfall is what placement reported (devices needed vs present).
	Shortfall placement.Shortfall
	// Rates are the module rates (req/s) the plan was made for: measured
	// envelopes where a rate re-plan took them, else the config's.
	Rates map[ModuleKey]float64
	// PlanErr joins the sessions the planner could not plan (they are in Plan
	// with Error set); nil when all were planned.
	PlanErr error
	// Trigger is when the cause was seen: the config or membership change
	// arrived, or the rate first left the hysteresis band.
	Trigger time.Time
	// PlanTook is the planner's runtime (0 when a membership change only
	// re-placed the last plan); PlaceTook is placement's.
	PlanTook, PlaceTook time.Duration
	// At is when the decision was handed to Target.Publish.
	At time.Time
}

// Target is where a Controller's decisions go: it places each plan on the
// members and makes it live. controlplane.EmbeddedControl's target is the
// gateway's own live switch (round-robin sharing kept on a short static
// pool); the cluster's re-planner publishes to Consul KV (Publisher). The
// Controller calls every method from Run's goroutine only, one at a time.
type Target interface {
	// Place places plan on members with opts (the co-location slowdowns
	// learned so far, Options.Calibration); prev is the plan placed before,
	// whose machines stay where they still fit (placement.Place).
	Place(plan *api.Plan, members []placement.Member, prev *api.Plan, opts placement.Options) (*api.Plan, placement.Shortfall, error)
	// Publish makes a placed decision live (the gateway's swap, Consul KV).
	// An error keeps the previous plan as the published one, and the
	// controller tries again at the next tick.
	Publish(r *Replan) error
	// Failed is told of every decision that failed (planner, placement or
	// Publish) with the config it was made for; the controller retries at
	// the next tick either way. The embedded gateway answers a waiting
	// config change with it.
	Failed(cfg *api.Config, err error)
}

// Publisher is the Target that places with placement.Place, publishes by
// calling itself and ignores failures (the controller logs them): the
// cluster's re-planner, and tests.
type Publisher func(r *Replan) error

// Place implements Target: placement.Place.
func (Publisher) Place(plan *api.Plan, members []placement.Member, prev *api.Plan, opts placement.Options) (*api.Plan, placement.Shortfall, error) {
	return placement.Place(plan, members, prev, opts)
}

// Publish implements Target: p(r).
func (p Publisher) Publish(r *Replan) error { return p(r) }

// Failed implements Target: nothing (the controller has logged it).
func (Publisher) Failed(*api.Config, error) {}

// Options configure a Controller. Plan and Target are required.
type Options struct {
	// Plan is the planner: planner.Plan with options, or simulate.PlanForBursts.
	// A nil plan means failure; a plan with an error means some sessions failed
	// (they carry Error) and the plan is still served.
	Plan func(*api.Config) (*api.Plan, error)
	// Target places each decision and makes it live.
	Target Target
	// Clock is the time the controller runs on (default SystemClock).
	Clock Clock
	// Tick is how often rates and the periodic re-plan are checked (default 1s).
	Tick time.Duration
	// Period re-plans periodically with the measured rates (default 10m;
	// negative: never).
	Period time.Duration
	// HysteresisUp and HysteresisDown are the band around the planned rate of a
	// module, as fractions: the rate of the latest envelope window above
	// planned×(1+up) for SustainUp, or the envelope (the highest window within
	// the monitor's horizon) below planned×(1−down) for SustainDown, re-plans
	// (cause "rate"), for the measured envelope. Defaults 0.2 and 0.3; down is
	// wider and slower, so a plan does not flap between sizes.
	HysteresisUp, HysteresisDown float64
	// SustainUp and SustainDown are how long a rate must stay outside the band
	// (defaults 3s and 30s).
	SustainUp, SustainDown time.Duration
	// UpSignificance is how far the rate over the latest RecentWindows
	// windows (ModuleRate.Recent) must also be above the planned rate to count
	// as a rise, in standard deviations of a Poisson count at the planned rate
	// over that span (√(planned×span)): default 4 (DefaultUpSignificance);
	// negative: the band alone. The band alone re-planned on noise: on 20
	// seeded runs of the load generator's Poisson arrivals at the planned
	// rate, 13, 11 and 8 of them re-planned up within 60 s at 2, 50 and
	// 150 req/s; with the significance none did, and a step to 2× at
	// 50 req/s is seen within 3.1 s (TestUpSignificanceOnPoisson,
	// docs/control-plane.md, "A rise must be significant").
	UpSignificance float64
	// Headroom multiplies measured rates before planning (default 1: the
	// planner's own utilisation headroom is the margin).
	Headroom float64
	// MinRateFraction floors a measured rate at this share of the config's rate
	// for the module (default 0.1), so an idle module keeps a machine and a
	// feasible plan. A session the planner finds infeasible at measured rates is
	// planned again at the config's rates.
	MinRateFraction float64
	// StaleRates drops a source's snapshot older than this (default 10s): a
	// gateway that stopped reporting no longer counts.
	StaleRates time.Duration
	// Logger logs each decision and failure (default: none).
	Logger *zap.Logger
	// Calibration, when set, is the measured side of the profiles
	// (docs/calibration.md): every plan is made from Calibrate's profiles,
	// and a drift of the calibrated profiles from those the plan was made
	// from beyond DriftThreshold (a ratio's distance from 1, default 0.1)
	// for DriftHold (default 3s: a start's first batches, queued behind
	// each other, read up to 2× slow for a second) re-plans with cause "drift".
	// Its co-location slowdowns (Colocations of the placed plan) are kept
	// while measured and for slowdownMemory (30s) after, and handed to
	// every placement (placement.Options.Slowdowns, with
	// DriftThreshold as the tolerance); a pair the current placement
	// shares a device with that slows beyond DriftThreshold for DriftHold,
	// unknown when it was placed, re-plans with cause "colocation".
	Calibration    Calibration
	DriftThreshold float64
	DriftHold      time.Duration
	// DriftHoldFaster is the hold of a drift to faster than planned (the
	// worst calibrated/planned ratio under 1 − DriftThreshold), default 30 s:
	// as SustainDown is for the rate, a plan that assumes slower devices than
	// measured costs more but keeps its SLO, so it waits out the noise. A
	// drift that turns from slower to faster, or back, starts its hold again.
	// Without it the demo's CPU models (ocr-pre, 10 ms, on a 2-core host
	// beside ONNX Runtime) drifted 0.4× then 1.3× of each plan in turn,
	// re-planned 12–26 times a minute, and each swap refused OCR requests
	// (docs/calibration.md, "Drift to faster").
	DriftHoldFaster time.Duration
	// Chains places every plan keeping each chain's fractional machines on
	// one device (placement.Options.Chains): for gateways that hold a
	// module's outputs on the backend for the next (--locality-bytes;
	// docs/locality.md). The embedded gateway's own Target sets it from its
	// flag; the cluster's re-planner (a Publisher) places with this.
	Chains bool
	// Covers, when set, maps the module rates (req/s) a plan was made at to
	// the rates it carries as the rate monitor measures them: the band a rate
	// re-plan is judged against (default: the rates themselves). A trace plan
	// carries its trace's busiest window, not the configured mean
	// (serving.TracePlanner.Covers). Called from Run's goroutine.
	Covers func(rates map[ModuleKey]float64) map[ModuleKey]float64
	// Hold, when set, names the modules whose rate band the controller does
	// not judge: a Tuner scales them (Tune), and only a config change, a
	// membership change or the periodic re-plan plans them again.
	Hold func(ModuleKey) bool
}

// Calibration is the measured side of the profiles: calibrate.Estimator
// (docs/calibration.md). The controller calls it from Run's goroutine.
type Calibration interface {
	// SetOffline hands it the configured (offline) profiles.
	SetOffline(offline *api.Config)
	// Calibrate returns offline with the calibrated profiles.
	Calibrate(offline *api.Config, now time.Time) *api.Config
	// Drift returns the calibrated/planned duration ratio of plan's group
	// farthest from 1, the entry it is at, and false when none was measured.
	Drift(offline *api.Config, plan *api.Plan, now time.Time) (ratio float64, entry string, ok bool)
	// DriftSlower is Drift over the groups measured slower than planned
	// only (ratio > 1), so that a drift to faster, held DriftHoldFaster,
	// does not hide one to slower.
	DriftSlower(offline *api.Config, plan *api.Plan, now time.Time) (ratio float64, entry string, ok bool)
	// Colocations returns the measured slowdowns of the models placed
	// plan packs on shared devices against the same models alone.
	Colocations(placed *api.Plan) []calibrate.Colocation
}

func (o *Options) defaults() error {
	if o.Plan == nil || o.Target == nil {
		return errors.New("controller: Options.Plan and Options.Target are required")
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	dur := func(d *time.Duration, def time.Duration, name string) error {
		if *d == 0 {
			*d = def
		}
		if *d < 0 && name != "period" {
			return fmt.Errorf("controller: %s %v: must be > 0", name, *d)
		}
		return nil
	}
	frac := func(f *float64, def float64, name string, hi float64) error {
		if *f == 0 {
			*f = def
		}
		if !(*f > 0 && *f < hi) {
			return fmt.Errorf("controller: %s %v: must be in (0, %v)", name, *f, hi)
		}
		return nil
	}
	sig := func(z *float64) error {
		switch {
		case *z == 0:
			*z = DefaultUpSignificance
		case math.IsNaN(*z) || math.IsInf(*z, 0):
			return fmt.Errorf("controller: up significance %v: must be a finite number of standard deviations (negative: the band alone)", *z)
		}
		return nil
	}
	return errors.Join(
		dur(&o.Tick, time.Second, "tick"),
		dur(&o.Period, 10*time.Minute, "period"),
		dur(&o.SustainUp, 3*time.Second, "sustain up"),
		dur(&o.SustainDown, 30*time.Second, "sustain down"),
		dur(&o.StaleRates, 10*time.Second, "stale rates"),
		dur(&o.DriftHold, 3*time.Second, "drift hold"),
		dur(&o.DriftHoldFaster, 30*time.Second, "drift hold faster"),
		frac(&o.DriftThreshold, 0.1, "drift threshold", math.Inf(1)),
		frac(&o.HysteresisUp, 0.2, "hysteresis up", math.Inf(1)),
		sig(&o.UpSignificance),
		frac(&o.HysteresisDown, 0.3, "hysteresis down", 1),
		frac(&o.Headroom, 1, "headroom", math.Inf(1)),
		frac(&o.MinRateFraction, 0.1, "min rate fraction", 1.0000001),
	)
}

// Status is what the controller last did, for the admin API and logs.
type Status struct {
	// Last is the last published decision (nil before the first).
	Last *Replan
	// Replans counts published decisions by cause; Unchanged counts re-plans
	// that gave the plan already published (not published again).
	Replans   map[string]int
	Unchanged int
	// Members is the membership the controller places on.
	Members []placement.Member
	// Measured is the latest merged envelope rate (req/s) per module.
	Measured map[ModuleKey]float64
	// Err is the last failure (planner or publish), "" after a success.
	Err string
}

// Controller is the control loop (issue 4): it holds the config, the
// membership, the measured rates and the last plan, and re-plans on a config
// change, a membership change, a rate outside the hysteresis band, a manual
// request, and periodically; it places each plan on the members and publishes
// it. SetConfig, SetMembers, ObserveRates, Replan and Status may be called from
// any goroutine; they never block on a re-plan. Run does the work, from one
// goroutine.
type Controller struct {
	o    Options
	wake chan struct{}

	mu      sync.Mutex // guards the inputs below
	in      inputs
	sources map[string]RateSnapshot

	status atomic.Pointer[Status]
	rates  atomic.Pointer[rateState] // what PlanningRates reads; written by Run's goroutine

	// Owned by Run's goroutine.
	// kept are the sessions the last drift or co-location re-plan kept on
	// their last plan (keepServed), so that it says so once.
	kept    map[string]bool
	cfg     *api.Config
	decl    map[ModuleKey]float64 // cfg's module rates
	members []placement.Member
	hwSet   string // sorted hardware types present, joined
	// fitted: the planner's last plan missed devices of the pool, or used
	// every device of a type (fitPool); a membership change plans again
	// while set.
	fitted   bool
	placed   *api.Plan
	pubCfg   *api.Config // the config placed was published with
	unplaced *api.Plan
	planned  map[ModuleKey]float64    // rates the current plan was made for
	override map[ModuleKey]float64    // measured rates in use instead of the config's
	fanOut   map[ModuleKey]api.FanOut // measured fan-out distributions in use instead of the config's (normalised)
	upSince  map[ModuleKey]time.Time
	downFrom map[ModuleKey]time.Time
	lastPlan time.Time
	retry    *pendingCause
	counts   map[string]int
	same     int
	short    placement.Shortfall // placement's shortfall of placed
	// driftFrom is when the calibrated profiles first left the threshold
	// around the current plan's durations; driftSeen when they were last
	// measured beyond it; driftFaster whether that drift is to faster than
	// planned (held DriftHoldFaster).
	driftFrom, driftSeen time.Time
	driftFaster          bool
	// slowdowns are the co-location slowdowns learned so far (the latest
	// measured per pair; a pair kept apart is not measured again and keeps
	// its last for slowdownMemory after slowSeen); placedWith those the
	// current placement was made with;
	// colocFrom is when a pair the placement did not know of first showed
	// beyond the threshold; shares whether the placement shares a device.
	slowdowns  placement.Slowdowns
	slowSeen   map[placement.Pair]time.Time
	placedWith placement.Slowdowns
	colocFrom  time.Time
	shares     bool
}

type inputs struct {
	cfg        *api.Config
	cfgAt      time.Time
	planned    *Planned // cfg's plan, made and checked by the config pipeline; nil: plan cfg here
	members    []placement.Member
	membersSet bool
	membersAt  time.Time
	manual     bool
	manualAt   time.Time
	tuned      *api.Plan // Tune's plan, not placed
	tunedAt    time.Time
}

// Planned is a config's plan made before it reaches the controller: by the
// config pipeline (controlplane.Pipeline), which plans a change once to check
// it and hands the checked plan over with SetPlanned instead of letting the
// controller plan it again. Owned by the controller once handed over.
type Planned struct {
	// Plan is the planner's output for the config at Rates, not placed.
	Plan *api.Plan
	// Err is the planner's error for the sessions it could not plan (they are
	// in Plan with Error set); nil when all were planned.
	Err error
	// Rates are the module rates (req/s) Plan was made for: PlanningRates's
	// answer for the config when it was planned.
	Rates map[ModuleKey]float64
	// Took is the planner's runtime.
	Took time.Duration
}

// rateState is the measured rates in use, with the configured rates they
// replace, as PlanningRates reads them.
type rateState struct {
	override, decl map[ModuleKey]float64
}

type pendingCause struct {
	cause   string
	trigger time.Time
}

// New returns a controller for cfg (validated: api.Load's output) and the
// initial members. The first Run step plans with cause "initial". Errors name
// a missing Plan or Publish, or an option out of range.
func New(cfg *api.Config, members []placement.Member, o Options) (*Controller, error) {
	if cfg == nil {
		return nil, errors.New("controller: no config")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c := &Controller{o: o, wake: make(chan struct{}, 1), sources: map[string]RateSnapshot{},
		planned: map[ModuleKey]float64{}, override: map[ModuleKey]float64{}, fanOut: map[ModuleKey]api.FanOut{}, upSince: map[ModuleKey]time.Time{}, downFrom: map[ModuleKey]time.Time{},
		counts: map[string]int{}}
	c.cfg, c.decl = cfg, Declared(cfg)
	c.setMembers(members)
	c.status.Store(&Status{Replans: map[string]int{}, Members: c.members})
	c.shareRates()
	return c, nil
}

// SetPlanned hands the controller a new validated config with its plan, made
// (and checked) by the config pipeline at p.Rates: the controller places and
// publishes p.Plan (cause "config") instead of planning cfg again. When the
// rates it would plan cfg at are no longer p.Rates (a rate re-plan came in
// between), it plans cfg itself, as SetConfig does.
func (c *Controller) SetPlanned(cfg *api.Config, p *Planned) {
	c.mu.Lock()
	c.in.cfg, c.in.cfgAt, c.in.planned = cfg, c.o.Clock.Now(), p
	c.mu.Unlock()
	c.poke()
}

// PlanningRates returns the module rates (req/s) the controller would plan cfg
// at if handed it now: the measured rate in use for a module whose configured
// rate cfg leaves as it was, else cfg's rate. Safe from any goroutine; the
// config pipeline plans a change at these rates (WithRates) and hands the plan
// over with SetPlanned.
func (c *Controller) PlanningRates(cfg *api.Config) map[ModuleKey]float64 {
	st := c.rates.Load()
	out := Declared(cfg)
	for k, r := range out {
		if m, ok := st.override[k]; ok && st.decl[k] == r {
			out[k] = m
		}
	}
	return out
}

// shareRates publishes the measured rates in use for PlanningRates. Called
// from Run's goroutine (and New) after they change.
func (c *Controller) shareRates() {
	c.rates.Store(&rateState{override: maps.Clone(c.override), decl: c.decl})
}

// SetConfig hands the controller a new validated config; it re-plans with cause
// "config". Measured rates stay in use for the modules whose configured rate did
// not change.
func (c *Controller) SetConfig(cfg *api.Config) {
	c.mu.Lock()
	c.in.cfg, c.in.cfgAt, c.in.planned = cfg, c.o.Clock.Now(), nil
	c.mu.Unlock()
	c.poke()
}

// SetMembers hands the controller the live backends; it re-places the plan
// (and re-plans when a hardware type appeared or vanished), cause "membership".
func (c *Controller) SetMembers(members []placement.Member) {
	m := append([]placement.Member(nil), members...)
	c.mu.Lock()
	c.in.members, c.in.membersSet, c.in.membersAt = m, true, c.o.Clock.Now()
	c.mu.Unlock()
	c.poke()
}

// ObserveRates records source's latest snapshot (a gateway id; "" is fine for
// one). The measured rate of a module is the sum over sources of their envelope
// rates (and its current rate the sum of their latest windows), from snapshots
// younger than Options.StaleRates; gateways' peaks need not coincide, so the
// sum errs high. Evaluated at the next tick.
func (c *Controller) ObserveRates(source string, s RateSnapshot) {
	c.mu.Lock()
	c.sources[source] = s
	c.mu.Unlock()
}

// Replan asks for a re-plan now with cause "manual".
func (c *Controller) Replan() {
	c.mu.Lock()
	c.in.manual, c.in.manualAt = true, c.o.Clock.Now()
	c.mu.Unlock()
	c.poke()
}

// Tune hands the controller a plan the Tuner scaled from the served one
// (Tuner.Tuned of the unplaced plan): the next step places and publishes it
// (cause "tune") without running the planner, unless a cause that plans
// (config, manual, a hardware type appearing) comes in the same step.
func (c *Controller) Tune(p *api.Plan) {
	c.mu.Lock()
	c.in.tuned, c.in.tunedAt = p, c.o.Clock.Now()
	c.mu.Unlock()
	c.poke()
}

// Status returns what the controller last did. Safe from any goroutine; the
// value is immutable.
func (c *Controller) Status() *Status { return c.status.Load() }

func (c *Controller) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run plans at once (cause "initial"), then re-plans as inputs arrive and at
// every tick, until ctx ends; returns ctx.Err(). Call it from one goroutine.
func (c *Controller) Run(ctx context.Context) error {
	tick, stop := c.o.Clock.Tick(c.o.Tick)
	defer stop()
	c.step(c.o.Clock.Now())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
		case <-tick:
		}
		c.step(c.o.Clock.Now())
	}
}

// Step runs one tick of Run at now on the caller's goroutine: for a driver
// on a virtual clock that feeds the rates itself (evaluation.Tuning). Never
// call it beside Run.
func (c *Controller) Step(now time.Time) { c.step(now) }

// step takes the pending inputs, decides whether to re-plan, and does it.
func (c *Controller) step(now time.Time) {
	c.mu.Lock()
	in := c.in
	c.in = inputs{}
	measured, current := map[ModuleKey]float64{}, map[ModuleKey]float64{}
	recent, recentSpan := map[ModuleKey]float64{}, map[ModuleKey]time.Duration{}
	var fanOuts map[ModuleKey]api.FanOut
	for src, s := range c.sources {
		if now.Sub(s.At) > c.o.StaleRates {
			delete(c.sources, src)
			continue
		}
		for k, r := range s.Envelopes() {
			measured[k] += r
		}
		for k, r := range s.Current() {
			current[k] += r
		}
		rr, rs := s.Recent()
		for k, r := range rr {
			recent[k] += r
			recentSpan[k] = max(recentSpan[k], rs[k])
		}
		for k, f := range s.FanOuts() {
			if fanOuts == nil {
				fanOuts = map[ModuleKey]api.FanOut{}
			}
			fanOuts[k] = addFanOut(fanOuts[k], f)
		}
	}
	c.mu.Unlock()

	var cause *pendingCause
	raise := func(name string, at time.Time) {
		if cause == nil {
			cause = &pendingCause{name, at}
		}
	}
	plan := false // run the planner (else only re-place)
	if c.placed == nil {
		raise(CauseInitial, now)
		plan = true
	}
	if in.cfg != nil {
		c.applyConfig(in.cfg)
		raise(CauseConfig, in.cfgAt)
		plan = true
	}
	if in.membersSet {
		old := c.hwSet
		c.setMembers(in.members)
		raise(CauseMembership, in.membersAt)
		plan = plan || old != c.hwSet || c.fitted
	}
	if in.manual {
		raise(CauseManual, in.manualAt)
		plan = true
	}
	if c.retry != nil {
		raise(c.retry.cause, c.retry.trigger)
		plan = true
	}
	if in.tuned != nil && !plan && c.placed != nil {
		raise(CauseTune, in.tunedAt)
		c.unplaced = in.tuned
	}
	if at, ok := c.rateOutOfBand(now, measured, current, recent, recentSpan); ok {
		raise(CauseRate, at)
		c.takeMeasured(measured)
		plan = true
	}
	// A measured distribution taken is planned at the rates in use: a rate
	// change is the rate rule's. Taking the envelopes here, a fan-out
	// re-plan 4 s into a step to twice the rate planned the step at 66 of
	// its 80 req/s, and the rate rule, its band now around 66, waited 8 s
	// more (fanout-live.sh CASES=all: 100 and 122 refused at 2×; 84 and 95
	// without).
	if c.fanOutShifted(fanOuts) {
		raise(CauseFanOut, now)
		plan = true
	}
	if at, ok := c.drifted(now); ok {
		raise(CauseDrift, at)
		plan = true
	}
	if at, ok := c.colocated(now); ok {
		raise(CauseColocation, at)
		plan = true
	}
	if c.o.Period > 0 && c.placed != nil && now.Sub(c.lastPlan) >= c.o.Period {
		raise(CausePeriodic, now)
		c.takeMeasured(measured)
		plan = true
	}
	c.publishStatus(measured, "")
	if cause == nil {
		return
	}
	var handed *Planned
	if in.cfg != nil {
		handed = in.planned
	}
	c.replan(now, *cause, plan, measured, handed)
	c.shareRates()
}

// applyConfig switches to cfg, dropping the measured rates of modules that are
// gone or whose configured rate changed (the operator's new rate wins), and
// the measured fan-out distributions of modules gone or whose configured
// fanout changed.
func (c *Controller) applyConfig(cfg *api.Config) {
	c.dropFanOuts(cfg)
	now := Declared(cfg)
	for k := range c.override {
		if r, ok := now[k]; !ok || r != c.decl[k] {
			delete(c.override, k)
		}
	}
	c.cfg, c.decl = cfg, now
}

func (c *Controller) setMembers(members []placement.Member) {
	c.members = append([]placement.Member(nil), members...)
	sort.Slice(c.members, func(i, j int) bool { return c.members[i].ID < c.members[j].ID })
	hw := map[string]bool{}
	for _, m := range c.members {
		hw[m.Hardware] = true
	}
	c.hwSet = fmt.Sprint(slices.Sorted(maps.Keys(hw)))
}

// rateOutOfBand reports whether some module's rate has stayed above or below
// the hysteresis band around its planned rate long enough, and since when. Up
// is judged on the current rate (the latest window, about the SLO long), so a
// burst counts by its volume over the window and one that leaves the band for
// less than SustainUp does not re-plan, although the envelope remembers it for
// the horizon; down on the envelope, so the peak of the whole horizon must have
// fallen. A rise must also be significant (Options.UpSignificance): the
// recent rate (over RecentWindows windows) that far above the planned rate,
// so Poisson noise at the planned rate does not re-plan. Modules without a
// measurement are not judged; a source without the recent rate (an older
// gateway) is judged on the band alone.
func (c *Controller) rateOutOfBand(now time.Time, measured, current, recent map[ModuleKey]float64, recentSpan map[ModuleKey]time.Duration) (time.Time, bool) {
	var first time.Time
	fired := false
	carried := c.carried()
	for k, planned := range c.planned {
		m, ok := measured[k]
		if !ok || (c.o.Hold != nil && c.o.Hold(k)) {
			delete(c.upSince, k)
			delete(c.downFrom, k)
			continue
		}
		check := func(out bool, since map[ModuleKey]time.Time, sustain time.Duration, dir string) {
			if !out {
				delete(since, k)
				return
			}
			s, ok := since[k]
			if !ok {
				s = now
				since[k] = now
			}
			if now.Sub(s) >= sustain {
				if !fired || s.Before(first) {
					first = s
				}
				fired = true
				c.o.Logger.Info("rate out of the plan's band", zap.String("session", k.Session), zap.String("module", k.Module),
					zap.String("direction", dir), zap.Float64("planned_rps", planned), zap.Float64("current_rps", current[k]),
					zap.Float64("envelope_rps", m), zap.Duration("for", now.Sub(s)))
			}
		}
		check(risen(current[k], recent[k], recentSpan[k], max(planned, carried[k]), c.o.HysteresisUp, c.o.UpSignificance), c.upSince, c.o.SustainUp, "up")
		floor := c.floor(k)
		// Below the band, unless already planned at the floor.
		check(m < planned*(1-c.o.HysteresisDown) && planned > floor*(1+1e-9), c.downFrom, c.o.SustainDown, "down")
	}
	return first, fired
}

// risen is the up rule at one tick (rateOutOfBand): the current rate above
// the band around base (base×(1+up), req/s), and the recent rate, counted
// over span, z standard deviations of a Poisson count above base. A source
// that reports no recent rate (span 0: a gateway from before the field, or
// nothing measured yet) is judged on the band alone, as is a negative z.
func risen(current, recent float64, span time.Duration, base, up, z float64) bool {
	if current <= base*(1+up) {
		return false
	}
	if span <= 0 || z < 0 || base <= 0 {
		return true
	}
	return recent > base+z*math.Sqrt(base/span.Seconds())
}

// carried returns the rate (req/s) each module of the current plan was
// planned for, where it is above the rate the plan was made at: a planner
// that fits a pool plans a binding pool at a higher rate for headroom
// (serving.Plan), and a rise up to that rate is carried
// without a re-plan (a plan swap in a burst costs more than it gives:
// docs/calibration.md, "Pool-aware planning"). Empty with Options.Covers
// (the rates covered are then the covering planner's).
func (c *Controller) carried() map[ModuleKey]float64 {
	out := map[ModuleKey]float64{}
	if c.unplaced == nil || c.o.Covers != nil {
		return out
	}
	for _, sp := range c.unplaced.Sessions {
		for _, mp := range sp.Modules {
			out[ModuleKey{sp.Name, mp.Name}] = mp.Rate
		}
	}
	return out
}

// drifted reports whether the calibrated durations of the current plan's
// groups have stayed more than DriftThreshold from the plan's for DriftHold
// (DriftHoldFaster when they are faster), and since when
// (Options.Calibration; calibrate.Estimator.Drift).
func (c *Controller) drifted(now time.Time) (time.Time, bool) {
	if c.o.Calibration == nil || c.unplaced == nil {
		return time.Time{}, false
	}
	r, at, ok := c.o.Calibration.Drift(c.cfg, c.unplaced, now)
	if ok && r < 1 {
		// The worst entry is faster; one slower beyond the threshold is the
		// drift to act on, with the shorter hold.
		if rs, as, oks := c.o.Calibration.DriftSlower(c.cfg, c.unplaced, now); oks && rs-1 > c.o.DriftThreshold {
			r, at = rs, as
		}
	}
	if !ok {
		// Nothing to judge at this tick (with every device 1.6× slower the
		// estimator had none of the plan's entries to compare for a tick or
		// two, 1–2 s after the first drift): the hold neither fires nor
		// restarts; a drift measured back within the threshold resets it,
		// and so does one measured no more for a hold (the estimator has
		// forgotten it: docs/calibration.md, "Forgetting"), so that a drift
		// of a burst does not fire the next one measured at once.
		if !c.driftFrom.IsZero() && now.Sub(c.driftSeen) > c.o.DriftHold {
			c.driftFrom = time.Time{}
		}
		return time.Time{}, false
	}
	if math.Abs(r-1) <= c.o.DriftThreshold {
		c.driftFrom = time.Time{}
		return time.Time{}, false
	}
	c.driftSeen = now
	if faster := r < 1; c.driftFrom.IsZero() || faster != c.driftFaster {
		c.driftFrom, c.driftFaster = now, faster
		c.o.Logger.Info("profiles drifting from the plan's", zap.String("entry", at), zap.Float64("measured_over_planned", r))
	}
	hold := c.o.DriftHold
	if c.driftFaster {
		hold = c.o.DriftHoldFaster
	}
	return c.driftFrom, now.Sub(c.driftFrom) >= hold
}

// colocated learns the co-location slowdowns of the current placement and
// reports whether a pair it shares a device with has slowed beyond
// DriftThreshold, not known to when it was placed, for DriftHold, and since
// when (Options.Calibration; calibrate.Estimator.Colocations).
func (c *Controller) colocated(now time.Time) (time.Time, bool) {
	for p, at := range c.slowSeen {
		if now.Sub(at) > slowdownMemory {
			delete(c.slowdowns, p)
			delete(c.slowSeen, p)
		}
	}
	if c.o.Calibration == nil || !c.shares {
		c.colocFrom = time.Time{}
		return time.Time{}, false
	}
	measured := placement.Slowdowns{}
	for _, m := range c.o.Calibration.Colocations(c.placed) {
		for _, w := range m.With {
			p := placement.Pair{Hardware: m.Hardware, Model: m.Model, With: w}
			measured[p] = max(measured[p], m.Slowdown)
		}
	}
	limit := 1 + c.o.DriftThreshold
	var news []placement.Pair
	for p, s := range measured {
		if c.slowdowns == nil {
			c.slowdowns, c.slowSeen = placement.Slowdowns{}, map[placement.Pair]time.Time{}
		}
		c.slowdowns[p], c.slowSeen[p] = s, now
		if s > limit && c.placedWith[p] <= limit {
			news = append(news, p)
		}
	}
	if len(news) == 0 {
		c.colocFrom = time.Time{}
		return time.Time{}, false
	}
	if c.colocFrom.IsZero() {
		c.colocFrom = now
		sort.Slice(news, func(i, j int) bool { return fmt.Sprint(news[i]) < fmt.Sprint(news[j]) })
		for _, p := range news {
			c.o.Logger.Info("co-located models slowing each other beyond the plan's", zap.String("hardware", p.Hardware),
				zap.String("model", p.Model), zap.String("with", p.With), zap.Float64("slowdown", measured[p]))
		}
	}
	return c.colocFrom, now.Sub(c.colocFrom) >= c.o.DriftHold
}

// slowdownMemory is how long a co-location slowdown is kept once no longer
// measured (the pair apart, or its series forgotten by the estimator):
// long enough that the placements right after the one that separated a
// pair keep it apart, short enough that a slowdown measured during a
// burst does not keep devices apart for good (docs/calibration.md,
// "Forgetting"). A pair measured again takes its new measure at once.
const slowdownMemory = 30 * time.Second

// placeOptions are the options of every placement: the co-location
// slowdowns learned so far, the drift threshold as their tolerance.
func (c *Controller) placeOptions() placement.Options {
	return placement.Options{Slowdowns: maps.Clone(c.slowdowns), Tolerance: c.o.DriftThreshold, Chains: c.o.Chains}
}

// takeMeasured makes the measured rates the ones to plan for.
func (c *Controller) takeMeasured(measured map[ModuleKey]float64) {
	for k, m := range measured {
		if _, ok := c.decl[k]; ok {
			c.override[k] = math.Max(m*c.o.Headroom, c.floor(k))
		}
	}
}

func (c *Controller) floor(k ModuleKey) float64 { return c.decl[k] * c.o.MinRateFraction }

// replan plans (when plan is set, or nothing was planned yet), places and
// publishes: steps 3, 6 and 7 of the config path (docs/architecture.md, "The
// config path"), the steps every decision takes, whatever its cause. handed,
// when its rates are the ones the controller plans at, is the plan to use
// instead of running the planner (a config change planned and checked at
// its entry). A failure at any step goes to fail: the last plan stays
// served, Target.Failed hears of it, and the next tick retries.
func (c *Controller) replan(now time.Time, cause pendingCause, plan bool, measured map[ModuleKey]float64, handed *Planned) {
	log := c.o.Logger.With(zap.String("cause", cause.cause))
	r := &Replan{Cause: cause.cause, Trigger: cause.trigger, Unplaced: c.unplaced, Rates: c.planned, Config: c.cfg}
	fail := func(err error) {
		c.retry = &cause
		log.Warn("re-plan failed; serving the last plan", zap.Error(err))
		c.publishStatus(measured, err.Error())
		c.o.Target.Failed(c.cfg, err)
	}
	// 3. Plan: at the rates in use, on the calibrated profiles, unless the
	// checked plan was handed over; then the fall-back to the config's rates
	// and the fit to the pool.
	if plan || c.unplaced == nil {
		cfg, rates := c.planningConfig()
		if c.o.Calibration != nil {
			c.o.Calibration.SetOffline(c.cfg)
			cfg = c.o.Calibration.Calibrate(cfg, now)
		}
		start := time.Now()
		var p *api.Plan
		var err error
		var took time.Duration
		// A handed plan was made at the rates in use but with the config's
		// fan-out distributions: not the plan when measured ones are in use.
		if handed != nil && handed.Plan != nil && maps.Equal(handed.Rates, rates) && len(c.fanOut) == 0 {
			p, err, took = handed.Plan, handed.Err, handed.Took
		} else if p, err = c.o.Plan(cfg); p == nil {
			fail(fmt.Errorf("planner: %w", err))
			return
		}
		c.driftFrom = time.Time{}
		p, err = c.fallBack(p, err, rates)
		if cause.cause == CauseDrift || cause.cause == CauseColocation {
			p, err = c.keepServed(p, err, log)
		}
		p, err = c.fitPool(p, err)
		r.PlanTook = took + time.Since(start)
		r.Unplaced, r.PlanErr, r.Rates = p, err, rates
	}
	// 6. Place on the members.
	start := time.Now()
	popts := c.placeOptions()
	placed, short, err := c.o.Target.Place(r.Unplaced, c.members, c.placed, popts)
	if err != nil {
		fail(fmt.Errorf("placement: %w", err))
		return
	}
	r.PlaceTook = time.Since(start)
	r.Plan, r.Shortfall = placed, short
	c.lastPlan = now
	clear(c.upSince)
	clear(c.downFrom)
	if keepsFit(cause.cause) && c.placed != nil && c.short.Missing() == 0 && short.Missing() > 0 {
		// A rate rise, or devices measured slower, that the pool cannot
		// hold, where the planner found no plan that fits: machines sharing
		// devices miss their deadlines (504) where the plan that fits
		// refuses the excess at admission (429), reading the measured pace.
		// Keep it (docs/calibration.md, "Drift re-planning"). A drift so
		// kept is judged again after DriftHold, on what is measured then.
		c.retry = nil
		if cause.cause == CauseRate {
			c.planned = r.Rates // judged against the rise from now on: no re-plan every SustainUp
		}
		c.same++
		log.Debug("re-plan needs more devices than the pool has; keeping the plan that fits", zap.String("cause", cause.cause), zap.Int("devices_missing", short.Missing()))
		c.publishStatus(measured, "")
		return
	}
	// The same plan for the same config is not published again; for a new
	// config it is (its sessions or backends changed, the plan did not).
	if c.placed != nil && c.pubCfg == c.cfg && SamePlan(c.placed, placed) {
		c.retry = nil
		c.placedWith, c.colocFrom = popts.Slowdowns, time.Time{}
		c.planned, c.unplaced = c.covers(r.Rates), r.Unplaced
		c.same++
		c.publishStatus(measured, "")
		return
	}
	// 7. Publish: the Target makes it live.
	r.At = c.o.Clock.Now()
	if err := c.o.Target.Publish(r); err != nil {
		fail(fmt.Errorf("publish: %w", err))
		return
	}
	c.retry = nil
	c.placed, c.unplaced, c.planned, c.pubCfg, c.short = placed, r.Unplaced, c.covers(r.Rates), r.Config, short
	c.placedWith, c.colocFrom, c.shares = popts.Slowdowns, time.Time{}, sharesDevice(placed)
	c.counts[r.Cause]++
	log.Info("plan published", zap.Float64("cost", placed.TotalCost), zap.Duration("plan_took", r.PlanTook),
		zap.Duration("place_took", r.PlaceTook), zap.Int("devices_missing", short.Missing()), zap.Error(r.PlanErr))
	if err := short.Err(); err != nil {
		log.Warn("pool too small for the plan", zap.Error(err))
	}
	c.publishStatus(measured, "")
	st := *c.status.Load()
	st.Last = r
	c.status.Store(&st)
}

// keepsFit reports whether a re-plan of cause is kept back when it needs
// more devices than the pool has and the plan served fits: a measured rate
// or measured durations, not an operator's change (config, manual), the
// pool's (membership) or the first plan.
func keepsFit(cause string) bool {
	return cause == CauseRate || cause == CauseDrift || cause == CauseColocation || cause == CauseFanOut
}

// sharesDevice reports whether placed puts two models on one backend.
func sharesDevice(placed *api.Plan) bool {
	model := map[string]string{}
	for m := range placed.Machines() {
		if was, ok := model[m.Backend]; ok && was != m.Module.Model {
			return true
		}
		model[m.Backend] = m.Module.Model
	}
	return false
}

// covers is Options.Covers of rates, or rates.
func (c *Controller) covers(rates map[ModuleKey]float64) map[ModuleKey]float64 {
	if c.o.Covers == nil {
		return rates
	}
	return c.o.Covers(rates)
}

// planningConfig is the config the planner sees: module rates and fan-out
// distributions replaced by the measured ones in use, and, when members are known, the members as its
// backends: the planner (serving.Plan) plans for the hardware types they
// have, so a type that left is planned around, not waited for.
func (c *Controller) planningConfig() (*api.Config, map[ModuleKey]float64) {
	rates := Declared(c.cfg)
	for k := range rates {
		if r, ok := c.override[k]; ok {
			rates[k] = r
		}
	}
	cfg := WithRates(c.cfg, rates)
	withFanOuts(cfg, c.fanOut)
	if len(c.members) > 0 {
		// The planner sees the pool as its backends: a planner that fits the
		// plan to the devices per type (serving.Plan) counts them.
		cfg.Backends = make([]api.Backend, len(c.members))
		for i, m := range c.members {
			cfg.Backends[i] = api.Backend{ID: m.ID, Hardware: m.Hardware}
		}
	}
	return cfg, rates
}

// WithRates returns a copy of cfg whose modules run at rates (req/s) where
// rates names them; cfg is not modified. The controller plans with it, and
// the config pipeline plans a change at the controller's PlanningRates.
func WithRates(cfg *api.Config, rates map[ModuleKey]float64) *api.Config {
	out := *cfg
	out.Sessions = make([]api.Session, len(cfg.Sessions))
	for i, s := range cfg.Sessions {
		s.Modules = append([]api.Module(nil), s.Modules...)
		for j := range s.Modules {
			if r, ok := rates[ModuleKey{s.Name, s.Modules[j].Name}]; ok {
				s.Modules[j].Rate = r
			}
		}
		out.Sessions[i] = s
	}
	return &out
}

// OnlyPresent returns cfg restricted to the hardware types in present: a
// shallow copy keeping only those types and their profiles, so the planner
// plans around the absent ones. It returns cfg itself when present is empty
// (no members known), names none of cfg's types, or names all of them. The controller plans with it; a cluster-mode gateway checks
// an admin change with it, so that a change it accepts is one the leader can
// plan.
func OnlyPresent(cfg *api.Config, present map[string]bool) *api.Config {
	if len(present) == 0 {
		return cfg
	}
	var hw []api.Hardware
	for _, h := range cfg.Hardware {
		if present[h.Name] {
			hw = append(hw, h)
		}
	}
	if len(hw) == 0 || len(hw) == len(cfg.Hardware) {
		return cfg
	}
	out := *cfg
	out.Hardware = hw
	out.Profiles = nil
	for _, p := range cfg.Profiles {
		if present[p.Hardware] {
			out.Profiles = append(out.Profiles, p)
		}
	}
	return &out
}

// fallBack plans again, at the config's rates, every session that failed at
// lowered measured rates (a lower rate can make an SLO infeasible: batches fill
// slower), and splices the results in.
func (c *Controller) fallBack(p *api.Plan, planErr error, rates map[ModuleKey]float64) (*api.Plan, error) {
	if planErr == nil {
		return p, nil
	}
	decl := c.decl
	var errs []error
	for i, sp := range p.Sessions {
		if sp.Error == "" {
			continue
		}
		lowered := false
		for k, r := range rates {
			if k.Session == sp.Name && r < decl[k] {
				lowered = true
			}
		}
		if !lowered {
			errs = append(errs, errors.New(sp.Error))
			continue
		}
		cfg, _ := c.planningConfig()
		s, _ := cfg.Session(sp.Name)
		one := *s
		one.Modules = append([]api.Module(nil), s.Modules...)
		for j := range one.Modules {
			k := ModuleKey{one.Name, one.Modules[j].Name}
			one.Modules[j].Rate = decl[k]
			rates[k] = decl[k]
			delete(c.override, k)
		}
		cfg.Sessions = []api.Session{one}
		q, err := c.o.Plan(cfg)
		if q == nil || len(q.Sessions) != 1 {
			errs = append(errs, fmt.Errorf("session %q: %s; at the config's rates: %v", sp.Name, sp.Error, err))
			continue
		}
		p.TotalCost += q.Sessions[0].Cost - sp.Cost
		p.Sessions[i] = q.Sessions[0]
		if err != nil {
			errs = append(errs, err)
		}
	}
	return p, errors.Join(errs...)
}

// keepServed keeps, in p, a drift or co-location re-plan, the last plan of
// every session that p could not plan and the current plan serves: the
// devices measured slower than the session's SLO allows (a loaded host's
// CPU models at 2–5× their profiles in the demo) make it infeasible on
// paper, and a session dropped from the plan answers every request 503
// (no plan), where its last plan, with admission reading the measured
// pace, serves what the devices can finish in time and refuses the rest
// (429). Only for the durations' causes: a config change is checked at its
// entry (serving.Check), and a hardware type gone from the pool cannot run
// the last plan. err is what p's planning said; the sessions kept are
// logged, and their errors stay in it.
func (c *Controller) keepServed(p *api.Plan, err error, log *zap.Logger) (*api.Plan, error) {
	kept := map[string]bool{}
	if c.unplaced == nil || !FailsMore(p, c.unplaced) {
		c.kept = kept
		return p, err
	}
	last := map[string]api.SessionPlan{}
	for _, sp := range c.unplaced.Sessions {
		if sp.Error == "" {
			last[sp.Name] = sp
		}
	}
	out := *p
	out.Sessions = append([]api.SessionPlan(nil), p.Sessions...)
	for i, sp := range out.Sessions {
		if old, ok := last[sp.Name]; ok && sp.Error != "" {
			// Said once while it lasts: the drift holds, and re-plans every DriftHold.
			lvl := zap.WarnLevel
			if c.kept[sp.Name] {
				lvl = zap.DebugLevel
			}
			log.Log(lvl, "re-plan leaves a session unplanned on the measured durations; serving its last plan (admission refuses what it cannot finish in time)",
				zap.String("session", sp.Name), zap.String("error", sp.Error))
			kept[sp.Name] = true
			out.TotalCost += old.Cost - sp.Cost
			out.Sessions[i] = old
		}
	}
	c.kept = kept
	return &out, err
}

func (c *Controller) publishStatus(measured map[ModuleKey]float64, errText string) {
	old := c.status.Load()
	counts := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		counts[k] = v
	}
	c.status.Store(&Status{Last: old.Last, Replans: counts, Unchanged: c.same, Members: c.members, Measured: measured, Err: errText})
}

// SamePlan reports whether two placed plans serve the same way (the planner's
// runtime aside): the controller does not publish a plan equal to the last one,
// and a gateway does not swap in a published plan equal to the one it serves.
func SamePlan(a, b *api.Plan) bool {
	x, y := *a, *b
	x.RuntimeMs, y.RuntimeMs = 0, 0
	return reflect.DeepEqual(x, y)
}

// Declared returns the configured rate (req/s) of every module of cfg.
func Declared(cfg *api.Config) map[ModuleKey]float64 {
	out := map[ModuleKey]float64{}
	if cfg == nil {
		return out
	}
	for _, s := range cfg.Sessions {
		for _, m := range s.Modules {
			out[ModuleKey{s.Name, m.Name}] = m.Rate
		}
	}
	return out
}
