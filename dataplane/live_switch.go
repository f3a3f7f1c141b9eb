package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/placement"
)

// LiveSwitch is the ModuleRunner of a gateway whose plan changes while it runs:
// it serves through the current LiveRunner, and Apply builds a LiveRunner for a
// new plan (models loaded on its backends first), swaps it in atomically,
// hands the items the previous one's dispatchers have not sent yet to the new
// one's (LiveRunner.handOver), and keeps the previous one open until what was
// submitted to it has finished, so no request is lost in the swap and the new
// dispatchers' admission counts the queue they inherit. Run and Estimate take no lock: one atomic load
// of the current runner. A module the current runner does not know (a session
// just removed) is looked up in the runners still draining, so a request that
// started before the swap finishes on the plan it started with.
//
// Once a previous runner has drained and been closed, its drain goroutine
// unloads (backends.Client.Unload) every model that runner loaded on a backend
// address and that neither the current runner (the switch's state at that
// moment, so after A→B→A nothing A needs is unloaded) nor a runner still
// draining loads there. The unload waits for the drain so that requests still
// on the old plan finish on loaded models; it holds the Apply lock, so an Apply
// never loads a model that an unload then removes. A batch of unloads is
// bounded by LiveOptions.UnloadTimeout (5 s) and never fails anything: a
// backend that no longer has the model (another gateway unloaded it first:
// with several gateways on one plan each unloads the same models, which is
// idempotent) or that cannot be reached (it left) is logged at debug, any
// other error at warn, and each batch's unloads in one info line. Close
// unloads nothing: other gateways may still serve those models.
//
// Apply calls are serialised by the LiveSwitch; Run, Estimate, ModuleMetadata,
// Plan and Collect may be called from any goroutine at any time.
type LiveSwitch struct {
	opts LiveOptions // Clients set: one pool shared by every runner
	pool *backends.Pool
	own  bool // pool made here; closed by Close
	// ownHealth: opts.Health made here; closed by Close.
	ownHealth bool
	replace   atomic.Bool // ReplaceOnEjection was called
	// beforeReplace, when set (tests only, before ReplaceOnEjection's
	// goroutine is kicked), runs on that goroutine before each re-placement
	// takes the Apply lock.
	beforeReplace func()
	// coloc is the co-location options health re-placements place with
	// (SetColocation; nil: none).
	coloc atomic.Pointer[placement.Options]
	// home is the placed plan of the last Apply that was not a health
	// re-placement (guarded by applyMu): a re-placement keeps modules where
	// home had them, so a backend that returns gets its share back.
	home *api.Plan
	log  *zap.Logger

	// stop is canceled by Close: it ends the unloads in flight.
	stop    context.Context
	stopNow context.CancelFunc
	applyMu sync.Mutex // serialises Apply and the unloads after a drain
	// orphans are what failed Applies loaded (guarded by applyMu); the next
	// unloads after a drain unload those no runner uses.
	orphans map[modelAt]bool
	cur     atomic.Pointer[liveState]
	drainMu sync.Mutex
	drains  []*LiveRunner // previous runners not closed yet
	// occupied is the machine-seconds (occupied and device) of the modules
	// drained runners held and no runner still serving holds (guarded by
	// drainMu): the counters go on from it when the plan changes.
	occupied map[occKey]occupancy
	oldView  atomic.Pointer[[]*LiveRunner] // lock-free copy of drains for Run
	closed   bool
	wg       sync.WaitGroup
}

// liveState is one generation: a runner, the placed plan it runs and the config
// it was built from. Immutable.
type liveState struct {
	runner *LiveRunner
	plan   *api.Plan // placed: every group lists its backends
	cfg    *api.Config
	grace  time.Duration // how long a request started on this runner can last
	down   []string      // the backends down when it was placed (Health.Down)
}

var (
	_ gateway.ModuleRunner   = (*LiveSwitch)(nil)
	_ gateway.FanOutObserver = (*LiveSwitch)(nil)
	_ gateway.MetadataSource = (*LiveSwitch)(nil)
	_ prometheus.Collector   = (*LiveSwitch)(nil)
)

// NewLiveSwitch builds the first LiveRunner from plan over cfg's backends
// (NewLiveRunner). opts.Clients, when nil, is a pool made here and shared by
// every runner Apply builds later; Close closes it.
func NewLiveSwitch(ctx context.Context, cfg *api.Config, plan *api.Plan, opts LiveOptions) (*LiveSwitch, error) {
	s := &LiveSwitch{opts: opts, pool: opts.Clients, log: opts.Logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.opts.UnloadTimeout <= 0 {
		s.opts.UnloadTimeout = 5 * time.Second
	}
	if s.pool == nil {
		s.pool, s.own = NewPool(), true
		s.opts.Clients = s.pool
	}
	if s.opts.Health == nil {
		s.opts.Health, s.ownHealth = NewHealth(opts.healthOptions()), true
	}
	st, err := s.build(ctx, cfg, plan, nil)
	if err != nil {
		if s.ownHealth {
			s.opts.Health.Close()
		}
		if s.own {
			s.pool.Close()
		}
		return nil, err
	}
	s.cur.Store(st)
	s.home = st.plan
	s.stop, s.stopNow = context.WithCancel(context.Background())
	empty := []*LiveRunner{}
	s.oldView.Store(&empty)
	return s, nil
}

// build places plan (keeping modules where prevPlan had them, when it is not
// nil) and builds its runner.
func (s *LiveSwitch) build(ctx context.Context, cfg *api.Config, plan, prevPlan *api.Plan) (*liveState, error) {
	if cfg == nil || plan == nil {
		return nil, errors.New("dataplane: a live plan needs a config and a plan")
	}
	var prev *LiveRunner
	if cur := s.cur.Load(); cur != nil {
		prev = cur.runner
	}
	down := s.opts.Health.Down()
	placed, _, err := s.place(cfg, plan, prevPlan)
	if err != nil {
		return nil, err
	}
	r, err := newLiveRunner(ctx, cfg, placed, s.opts, prev)
	if err != nil {
		return nil, err
	}
	r.sw = s
	return &liveState{runner: r, plan: placed, cfg: cfg, grace: graceOf(cfg), down: down}, nil
}

// graceOf is how long a request started under cfg may still be running: its
// longest SLO (DefaultTimeout for a session without one), plus a second.
func graceOf(cfg *api.Config) time.Duration {
	var g time.Duration
	for _, s := range cfg.Sessions {
		d := s.SLO.D()
		if d <= 0 {
			d = gateway.DefaultTimeout
		}
		g = max(g, d)
	}
	return g + time.Second
}

// Apply places plan on cfg's backends, loads the models there with the plan's
// batch sizes and concurrencies, and swaps the new dispatch table in: requests
// submitted from then on use it; items already submitted and not yet sent move
// to the new runner's dispatcher of their module (same session, module and
// model; dispatcher.Handover), with one info line giving how many; batches
// already sent finish on the previous runner, which is closed once every item
// submitted to it is done (or, at the latest, after its longest SLO plus
// DefaultTimeout), and the models only it used are then unloaded (see
// LiveSwitch). An error (a group whose hardware has no backend, a backend that
// refuses the load) leaves the running plan as it was. Apply calls are
// serialised, and wait for a batch of unloads in progress (UnloadTimeout at most).
func (s *LiveSwitch) Apply(ctx context.Context, cfg *api.Config, plan *api.Plan) error {
	return s.apply(ctx, cfg, plan, false)
}

// apply is Apply; replacing says it is a health re-placement (replace.go),
// placed from home rather than from the plan being replaced.
func (s *LiveSwitch) apply(ctx context.Context, cfg *api.Config, plan *api.Plan, replacing bool) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.applyLocked(ctx, cfg, plan, replacing)
}

// applyLocked is apply with applyMu held.
func (s *LiveSwitch) applyLocked(ctx context.Context, cfg *api.Config, plan *api.Plan, replacing bool) error {
	s.drainMu.Lock()
	closed := s.closed
	s.drainMu.Unlock()
	if closed {
		return fmt.Errorf("%w: the gateway is shutting down", gateway.ErrUnavailable)
	}
	prevPlan := s.home
	if !replacing {
		prevPlan = s.cur.Load().plan
	}
	if replacing && s.samePlacement(cfg, plan, prevPlan) {
		return nil
	}
	st, err := s.build(ctx, cfg, plan, prevPlan)
	if err != nil {
		// What the failed runner loaded stays until the next drain's unloads:
		// unloading it now would load and unload it again at every retry of
		// the same plan (the cluster follower retries every 2 s).
		var partial *partialLoadError
		if errors.As(err, &partial) {
			if s.orphans == nil {
				s.orphans = map[modelAt]bool{}
			}
			for k := range partial.loaded {
				s.orphans[k] = true
			}
		}
		return err
	}
	s.drainMu.Lock()
	if s.closed { // Close ran while we built: do not leak the new runner
		s.drainMu.Unlock()
		return errors.Join(st.runner.Close(), fmt.Errorf("%w: the gateway is shutting down", gateway.ErrUnavailable))
	}
	old := s.cur.Swap(st)
	close(old.runner.replaced)
	st.runner.own()
	if !replacing {
		s.home = st.plan
	}
	s.drains = append(s.drains, old.runner)
	s.publishDrainsLocked()
	s.wg.Add(1)
	s.drainMu.Unlock()
	if n := old.runner.handOver(st.runner); n > 0 {
		s.log.Info("queued items handed to the new plan's dispatchers", zap.Int("items", n))
	}
	if len(st.runner.kept) > 0 {
		s.log.Info("sessions the new plan leaves as they were keep their dispatchers", zap.Strings("sessions", st.runner.kept))
	}
	go s.drain(old)
	return nil
}

// canReplace reports whether a health re-placement will move a machine on
// backend (of hardware) elsewhere: ReplaceOnEjection is on and another
// backend of that hardware is up (liveModule.awaitReplacement). Any goroutine.
func (s *LiveSwitch) canReplace(hardware, backend string) bool {
	if !s.replace.Load() {
		return false
	}
	for _, b := range s.cur.Load().cfg.Backends {
		if b.Hardware == hardware && b.ID != backend && !s.opts.Health.isDown(b.ID) {
			return true
		}
	}
	return false
}

// samePlacement reports whether a health re-placement of plan would place
// it as the running plan is, on the same backends up and down: then there
// is nothing to re-place (a backend that starts or stops straggling while
// no other of its hardware is idle, as with one backend per type), and
// rebuilding the runner would only cost a load round and a hand-over.
func (s *LiveSwitch) samePlacement(cfg *api.Config, plan, prevPlan *api.Plan) bool {
	cur := s.cur.Load()
	if cur.cfg != cfg || !slices.Equal(cur.down, s.opts.Health.Down()) {
		return false
	}
	placed, _, err := s.place(cfg, plan, prevPlan)
	return err == nil && reflect.DeepEqual(placed, cur.plan)
}

// place places plan on cfg's backends as build does (placement.Place,
// static, keeping modules where prevPlan had them, keeping apart the pairs
// SetColocation names).
func (s *LiveSwitch) place(cfg *api.Config, plan, prevPlan *api.Plan) (*api.Plan, placement.Shortfall, error) {
	var o placement.Options
	if c := s.coloc.Load(); c != nil {
		o.Slowdowns, o.Tolerance = c.Slowdowns, c.Tolerance
	}
	o.Static, o.Chains = true, s.opts.Locality > 0
	return placement.Place(plan, placement.Members(s.placeOn(cfg.Backends)), prevPlan, o)
}

// SetColocation hands the switch the co-location slowdowns (and their
// tolerance) the control loop places with, so that a health re-placement
// (ReplaceOnEjection) keeps the same pairs apart (docs/calibration.md,
// "Co-location"). Safe from any goroutine; o is not modified.
func (s *LiveSwitch) SetColocation(o placement.Options) {
	// Chains is not stored: place sets it from the switch's own Locality.
	s.coloc.Store(&placement.Options{Slowdowns: o.Slowdowns, Tolerance: o.Tolerance})
}

// handOver moves the items r's dispatchers have not sent yet to the
// dispatchers of to that serve the same session's module with the same model
// (dispatcher.Handover), so that to's admission counts them on the backends
// they will run on, and returns how many moved. A moved item keeps its Done,
// the liveModule of r that it was submitted to (finish): r's outstanding
// count, item pool and metrics stay r's, and r drains until they are done;
// to's liveModule sends it (Send reads only the item's inputs and its
// liveItem, the same type in every runner). A module whose model changed
// keeps its items: they finish on r, on the model they were meant for.
func (r *LiveRunner) handOver(to *LiveRunner) int {
	n := 0
	for session, mods := range r.sessions {
		for name, lm := range mods {
			if nm := to.moduleOrNil(session, name); nm != nil && nm != lm && nm.model == lm.model { // nm == lm: to kept it
				n += lm.disp.Handover(nm.disp)
			}
		}
	}
	return n
}

func (s *LiveSwitch) publishDrainsLocked() {
	v := append([]*LiveRunner(nil), s.drains...)
	s.oldView.Store(&v)
}

// drain closes old once nothing submitted to it is outstanding and a request
// that started just before the swap can no longer reach it (old.grace), or after
// old.grace + DefaultTimeout at the latest, then unloads what only old used
// (unloadDropped). Nothing is closed or unloaded once Close has begun.
func (s *LiveSwitch) drain(old *liveState) {
	defer s.wg.Done()
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		el := time.Since(start)
		if el >= old.grace && old.runner.outstanding() == 0 || el >= old.grace+gateway.DefaultTimeout {
			break
		}
		s.drainMu.Lock()
		closed := s.closed
		s.drainMu.Unlock()
		if closed {
			return // Close closes it
		}
	}
	s.drainMu.Lock()
	for i, r := range s.drains {
		if r == old.runner {
			s.drains = append(s.drains[:i:i], s.drains[i+1:]...)
			s.publishDrainsLocked()
			s.carryOccupiedLocked(old.runner)
			s.drainMu.Unlock()
			old.runner.Close()
			s.unloadDropped(old.runner.loaded)
			return
		}
	}
	s.drainMu.Unlock()
}

// unloadDropped unloads every model in loaded (what a drained runner loaded)
// or left loaded by a failed Apply (orphans) on a backend where neither the
// current runner nor a runner still draining loads it. It runs on the drain
// goroutine, after the drained runner is closed, holding applyMu so that no
// Apply loads a model between the choice and the unload. Errors are logged,
// never returned.
func (s *LiveSwitch) unloadDropped(loaded map[modelAt]bool) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.drainMu.Lock()
	if s.closed {
		s.drainMu.Unlock()
		return
	}
	keep := []*LiveRunner{s.cur.Load().runner}
	keep = append(keep, s.drains...)
	s.drainMu.Unlock()
	if len(s.orphans) > 0 {
		loaded = maps.Clone(loaded)
		maps.Copy(loaded, s.orphans)
		s.orphans = nil
	}
	defer s.closeUnused(loaded, keep) // after the unloads, which need the connections
	var drop []modelAt
	for k := range loaded {
		used := false
		for _, r := range keep {
			used = used || r.loaded[k]
		}
		if !used {
			drop = append(drop, k)
		}
	}
	if len(drop) == 0 {
		return
	}
	sort.Slice(drop, func(i, j int) bool {
		return drop[i].addr < drop[j].addr || drop[i].addr == drop[j].addr && drop[i].model < drop[j].model
	})
	ctx, cancel := context.WithTimeout(s.stop, s.opts.UnloadTimeout)
	defer cancel()
	var unloaded, gone []string
	for _, k := range drop {
		name := k.model + "@" + k.addr
		c, err := s.pool.Client(k.addr)
		if err == nil {
			err = c.Unload(ctx, k.model)
		}
		switch {
		case err == nil:
			unloaded = append(unloaded, name)
		case s.stop.Err() != nil:
			return // Close: the gateway is going away, and unloads nothing
		case errors.Is(err, backends.ErrUnknownModel), errors.Is(err, backends.ErrBackendUnavailable):
			// Unloaded already (another gateway was first), or the backend left.
			gone = append(gone, name)
			s.log.Debug("model to unload is gone", zap.String("model", k.model), zap.String("backend", k.addr), zap.Error(err))
		default:
			s.log.Warn("unload a model the plan no longer uses", zap.String("model", k.model), zap.String("backend", k.addr), zap.Error(err))
		}
	}
	s.log.Info("unloaded models the plan no longer uses", zap.Strings("unloaded", unloaded), zap.Strings("already_gone", gone),
		zap.Int("failed", len(drop)-len(unloaded)-len(gone)))
}

// closeUnused closes the pooled connections to the backends of loaded that no
// runner in keep loads anything on (a backend that left, or one the
// plan no longer uses), so a gateway under membership churn does not keep a
// connection per backend it ever served. A later plan that places a model there
// again dials anew. Called with applyMu held.
func (s *LiveSwitch) closeUnused(loaded map[modelAt]bool, keep []*LiveRunner) {
	used := map[string]bool{}
	for _, r := range keep {
		for k := range r.loaded {
			used[k.addr] = true
		}
	}
	for k := range loaded {
		if used[k.addr] {
			continue
		}
		used[k.addr] = true // closed once
		if err := s.pool.Remove(k.addr); err != nil {
			s.log.Debug("close the connection to a backend no longer used", zap.String("backend", k.addr), zap.Error(err))
		}
	}
}

// outstanding is the number of items submitted and not yet done, all the
// modules r owns (a module a later runner kept is that runner's to drain).
func (r *LiveRunner) outstanding() int64 {
	var n int64
	for _, mods := range r.sessions {
		for _, lm := range mods {
			if lm.owner.Load() == r {
				n += lm.outstanding.Load()
			}
		}
	}
	return n
}

// Close closes the current runner and every runner still draining (their queued
// items fail with ErrUnavailable) and the client pool if it was made here. It
// unloads nothing (other gateways may serve the same models) and cancels
// unloads in flight.
func (s *LiveSwitch) Close() error {
	s.drainMu.Lock()
	if s.closed {
		s.drainMu.Unlock()
		return nil
	}
	s.closed = true
	s.stopNow()
	rs := append([]*LiveRunner{s.cur.Load().runner}, s.drains...)
	s.drains = nil
	s.drainMu.Unlock()
	s.wg.Wait()
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.Close())
	}
	if s.ownHealth {
		s.opts.Health.Close()
	}
	if s.own {
		errs = append(errs, s.pool.Close())
	}
	return errors.Join(errs...)
}

// Plan returns the running plan, placed: every group lists its backend ids.
// Immutable; do not modify.
func (s *LiveSwitch) Plan() *api.Plan { return s.cur.Load().plan }

// Config returns the config the running plan was built from. Immutable.
func (s *LiveSwitch) Config() *api.Config { return s.cur.Load().cfg }

// Runner returns the current LiveRunner (for its Stats).
func (s *LiveSwitch) Runner() *LiveRunner { return s.cur.Load().runner }

// runnerFor is the runner that serves session's module: the current one, or
// one still draining that knows it.
func (s *LiveSwitch) runnerFor(session, module string) *LiveRunner {
	r := s.cur.Load().runner
	if _, ok := r.sessions[session][module]; ok {
		return r
	}
	for _, o := range *s.oldView.Load() {
		if _, ok := o.sessions[session][module]; ok {
			return o
		}
	}
	return r // answers why it cannot run the module
}

// Run implements ModuleRunner on the runner that serves the module.
func (s *LiveSwitch) Run(ctx context.Context, session, module string, inputs []api.Tensor, call *gateway.Call,
	done func([]api.Tensor, gateway.Timing, error)) {
	s.runnerFor(session, module).Run(ctx, session, module, inputs, call, done)
}

// Abandon implements gateway.Abandoner on every runner that serves the
// module: the current one and those draining (an item handed over to the
// current runner is found there; one submitted to a draining runner's
// module that the current one lacks, there).
func (s *LiveSwitch) Abandon(session, module string) {
	s.cur.Load().runner.Abandon(session, module)
	for _, o := range *s.oldView.Load() {
		o.Abandon(session, module)
	}
}

// Estimate implements ModuleRunner.
// FannedOut implements gateway.FanOutObserver on the runner that serves the
// module.
func (s *LiveSwitch) FannedOut(session, module string, items int) {
	s.runnerFor(session, module).FannedOut(session, module, items)
}

func (s *LiveSwitch) Estimate(session, module string) time.Duration {
	return s.runnerFor(session, module).Estimate(session, module)
}

// ModuleMetadata implements MetadataSource.
func (s *LiveSwitch) ModuleMetadata(session, module string) (inputs, outputs []gateway.TensorMeta, ok bool) {
	return s.runnerFor(session, module).ModuleMetadata(session, module)
}

// Describe implements prometheus.Collector.
func (s *LiveSwitch) Describe(ch chan<- *prometheus.Desc) {
	s.cur.Load().runner.Describe(ch)
	ch <- metrics.DescOccupied
	ch <- metrics.DescDevice
	if s.ownHealth {
		s.opts.Health.Describe(ch)
	}
}

// Collect implements prometheus.Collector with the current runner's counters
// (they restart from 0 when a new plan is applied: a counter reset to
// Prometheus), and the occupancy summed over every plan served
// (metrics.GatewayOccupiedMachineSecondsTotal) and its device time
// (metrics.GatewayDeviceMachineSecondsTotal), which do not restart.
func (s *LiveSwitch) Collect(ch chan<- prometheus.Metric) {
	s.drainMu.Lock()
	cur := s.cur.Load().runner
	occ := maps.Clone(s.occupied)
	if occ == nil {
		occ = map[occKey]occupancy{}
	}
	seen := map[*liveModule]bool{}
	for _, r := range append([]*LiveRunner{cur}, s.drains...) {
		r.eachModule(func(session, module string, lm *liveModule) {
			if !seen[lm] {
				seen[lm] = true
				addOccupied(occ, session, module, lm)
			}
		})
	}
	s.drainMu.Unlock()
	cur.Collect(ch)
	for k, v := range occ {
		ch <- prometheus.MustNewConstMetric(metrics.DescOccupied, prometheus.CounterValue, v.occupied, k.session, k.module, k.hardware)
		ch <- prometheus.MustNewConstMetric(metrics.DescDevice, prometheus.CounterValue, v.device, k.session, k.module, k.hardware)
	}
	if s.ownHealth {
		s.opts.Health.Collect(ch)
	}
}

// occKey is one series of metrics.GatewayOccupiedMachineSecondsTotal and
// metrics.GatewayDeviceMachineSecondsTotal.
type occKey struct{ session, module, hardware string }

// occupancy is one occKey's machine-seconds: occupied (sent → done) and the
// device time the backends reported within it.
type occupancy struct{ occupied, device float64 }

// carryOccupiedLocked adds to s.occupied the machine-seconds of the
// modules of r, a runner drained (nothing outstanding) and taken out of
// s.drains, that neither the current runner nor one still draining holds (a
// session a new plan leaves as it was keeps its modules: the last runner
// holding one carries it). Called with drainMu held.
func (s *LiveSwitch) carryOccupiedLocked(r *LiveRunner) {
	held := map[*liveModule]bool{}
	for _, o := range append([]*LiveRunner{s.cur.Load().runner}, s.drains...) {
		o.eachModule(func(_, _ string, lm *liveModule) { held[lm] = true })
	}
	r.eachModule(func(session, module string, lm *liveModule) {
		if !held[lm] {
			if s.occupied == nil {
				s.occupied = map[occKey]occupancy{}
			}
			addOccupied(s.occupied, session, module, lm)
		}
	})
}

// addOccupied adds lm's machine-seconds to occ: each slot's (spares too)
// busy lane-seconds over its lanes, and the device time its backends
// reported (liveModule.device), by hardware type.
func addOccupied(occ map[occKey]occupancy, session, module string, lm *liveModule) {
	if lm.disp != nil {
		st := lm.disp.Stats()
		for _, sl := range append(st.Slots, st.Spare...) {
			k := occKey{session, module, sl.Slot.Hardware}
			o := occ[k]
			o.occupied += sl.Busy.Seconds() / float64(max(sl.Slot.Concurrency, 1))
			occ[k] = o
		}
	}
	lm.device.Range(func(hw, v any) bool {
		k := occKey{session, module, hw.(string)}
		o := occ[k]
		o.device += time.Duration(v.(*atomic.Int64).Load()).Seconds()
		occ[k] = o
		return true
	})
}

// Health returns the backends' health the switch's runners share.
func (s *LiveSwitch) Health() *Health { return s.opts.Health }
