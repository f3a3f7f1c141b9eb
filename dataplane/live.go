package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/tracing"
)

// LiveOptions configure a LiveRunner.
type LiveOptions struct {
	// Policy is the dispatch policy, dispatcher.TC (default) or dispatcher.RR.
	Policy dispatcher.Policy
	// Flush is when a partial batch goes: dispatcher.FlushDeadline (the zero
	// value's, the paper's) or dispatcher.FlushIdle (also to an idle machine
	// while the measured load leaves capacity; `piccolo gateway`'s default).
	Flush dispatcher.Flush
	// Clients gives the backend clients; default: a new backends.Pool, closed by
	// Close.
	Clients *backends.Pool
	// LoadTimeout bounds loading the models on the backends (default 30s).
	LoadTimeout time.Duration
	// UnloadTimeout bounds one batch of unloads a LiveSwitch sends after a
	// previous plan has drained (default 5s). Unused by a LiveRunner alone.
	UnloadTimeout time.Duration
	// Logger receives the LiveSwitch's info line per batch of unloads and its
	// debug lines for unloads that found nothing to do; nil logs nothing.
	Logger *zap.Logger
	// SlackFraction is the share of a module's budget kept free for what the
	// dispatcher does not model (the network, the gateway, a loaded host): an
	// item's dispatch deadline is min(now + budget, the request's deadline)
	// minus this share of the budget. The TC dispatcher flushes a partial batch
	// at the last moment that meets that deadline, so at low load a request
	// takes nearly its budget; without slack it would arrive just too late.
	// The slack is at most the module's headroom in the plan, budget − WCL:
	// with more, the deadline flush sends before the planned batch has filled
	// at the planned rate, and the module serves less than planned (the
	// demo's m2 planned at 203.5 req/s, b8 427 ms, budget 486 ms, WCL 461 ms:
	// a 49 ms slack left 10 ms to fill a batch, its batches averaged 2.2
	// items and it refused 24% of a burst its plan serves;
	// docs/dataplane.md, "Module deadlines"). Default 0.1; negative means none.
	SlackFraction float64
	// InvocationSlack turns on Llama's per-invocation slack
	// (dispatcher.ModuleTimes.PathBudget; docs/dataplane.md, "Per-invocation
	// slack"): an item's flush deadline at a module is the module's share of
	// the time its request has left (its budget over the longest path of
	// budgets from it to a sink), not its budget from now. Off: the paper's
	// per-module budgets.
	InvocationSlack bool
	// LateCommit turns on Llama's late commit, per batch
	// (dispatcher.Options.LateCommit; docs/dataplane.md, "Late commit"): a
	// batch that would end late on its group's machine goes to an idle
	// machine of another of the module's planned groups that ends it in
	// time. Off: the group the plan's shares chose.
	LateCommit bool
	// Metrics, when set, records each module's queue and compute times and batch
	// sizes (children resolved here, once per module).
	Metrics *metrics.Metrics
	// Admission turns on the dispatchers' admission (dispatcher.Options.Admission):
	// an item whose predicted completion, from the machines' real lane and queue
	// state (the device's too, when modules share it), is after its DoneBy (the
	// request's deadline less what the modules after it need as their queues
	// are now, Item.SetDeadlines) is refused at once with gateway.ErrOverloaded
	// (429) instead of being queued to fail late with ErrDeadline (504).
	// `piccolo gateway` turns it on (--admission, default true); off,
	// admission is the DAG estimate alone (Estimate) (docs/dataplane.md,
	// "Admission").
	Admission bool
	// Health, when set, is the backends' health shared with other runners (a
	// LiveSwitch makes one); nil: the runner makes its own from HedgeBudget and
	// ProbeInterval and closes it with itself.
	Health *Health
	// HedgeBudget is the share of batches that may be hedged (HealthOptions).
	// Default 0.05; negative: no hedging.
	HedgeBudget float64
	// ProbeInterval is how often backends are health-probed (HealthOptions).
	// Default 1s; negative: never, except an ejected one until it is back.
	ProbeInterval time.Duration
	// Spare gives each module the pool's backends that the placed plan leaves
	// idle and whose hardware has a profile for the module's model, as spare
	// machines its batches overflow to before admission refuses
	// (dispatcher.SetSpare; the models are loaded there when the plan is
	// applied; dataplane/spare.go). `piccolo gateway` turns it on (--spare).
	Spare bool
	// Calibration, when set, receives every batch's measured duration
	// (HealthOptions.Calibration) and turns on the backends' pace, which a
	// warm-up batch measures before a backend takes traffic (warmup.go).
	Calibration *calibrate.Estimator
	// BackendTLS is the TLS config of the calls to the backends whose entry
	// (api.Backend.TLS, Consul meta "tls") says they serve TLS: the CA their
	// certificates are verified with (`piccolo gateway --backend-ca`). Nil:
	// the system's roots.
	BackendTLS *tls.Config
	// BackendTLSMode is who decides whether a backend is called over TLS
	// (`piccolo gateway --backend-tls`): BackendTLSRequired, every backend
	// whatever its entry says (one that serves plain text cannot be
	// reached); BackendTLSOff, none; BackendTLSPreferred or "", the
	// backend's entry (api.Backend.TLS, Consul meta "tls"), as a backend
	// registering itself may claim.
	BackendTLSMode string
	// Locality, when above 0, turns on Cloudflow's locality (locality.go,
	// docs/locality.md): a module whose outputs feed another asks the backend
	// to hold each item's outputs of at least this many bytes, a batch sent
	// to a backend that holds its inputs names them instead of sending them,
	// and a batch goes to a free machine on the backend holding its items
	// when one is. 0: off (every byte sent every time).
	Locality int
}

// The values of LiveOptions.BackendTLSMode.
const (
	BackendTLSRequired  = "required"
	BackendTLSPreferred = "preferred"
	BackendTLSOff       = "off"
)

// CheckBackendTLSMode refuses a BackendTLSMode other than the three, naming them.
func CheckBackendTLSMode(mode string) error {
	switch mode {
	case "", BackendTLSRequired, BackendTLSPreferred, BackendTLSOff:
		return nil
	}
	return fmt.Errorf("backend TLS %q: want %s, %s or %s", mode, BackendTLSRequired, BackendTLSPreferred, BackendTLSOff)
}

// healthOptions are the HealthOptions o asks for.
func (o LiveOptions) healthOptions() HealthOptions {
	hedge := o.HedgeBudget
	switch {
	case hedge == 0:
		hedge = 0.05
	case hedge < 0:
		hedge = 0
	}
	return HealthOptions{ProbeInterval: o.ProbeInterval, HedgeBudget: hedge, Logger: o.Logger, Calibration: o.Calibration}
}

// LiveRunner is the ModuleRunner of the live gateway: per module, a dispatcher
// built from the plan's ModulePlan (§III-B TC dispatch) whose Sender sends whole
// batches to the placed backends with the backend client. Its module table is
// immutable after NewLiveRunner; Run and Estimate take no lock of their own.
type LiveRunner struct {
	sessions map[string]map[string]*liveModule
	// cfg and plans are what the runner was built from: the config and, per
	// session it serves, its placed plan; the next runner compares its own
	// with them to keep a session's modules (keptSession).
	cfg       *api.Config
	plans     map[string]*api.SessionPlan
	kept      []string          // sessions whose modules were prev's (keptSession), in the plan's order
	failed    map[string]string // session -> why it has no plan
	loaded    map[modelAt]bool  // what NewLiveRunner loaded, by backend address
	pool      *backends.Pool
	ownPool   bool
	health    *Health
	ownHealth bool
	used      []*backendHealth // the backends this runner dispatches to (refs taken)
	// sw is the LiveSwitch that built the runner (nil: a runner alone);
	// replaced is closed when sw swaps a later runner in. A failed batch
	// that no machine can take now waits for the swap and retries on the
	// current runner (liveModule.awaitReplacement).
	sw       *LiveSwitch
	replaced chan struct{}
}

// modelAt is a model loaded on the backend at addr (a host:port, not a backend
// id: two configs may give one backend different ids, or one id a new address).
type modelAt struct{ addr, model string }

var (
	_ gateway.ModuleRunner   = (*LiveRunner)(nil)
	_ gateway.Abandoner      = (*LiveRunner)(nil)
	_ gateway.FanOutObserver = (*LiveRunner)(nil)
	_ gateway.MetadataSource = (*LiveRunner)(nil)
	_ dispatcher.Sender      = (*liveModule)(nil)
)

// liveModule is one module: its dispatcher, the clients of its backends, and the
// numbers admission control reads.
type liveModule struct {
	session, name, model string
	disp                 *dispatcher.Dispatcher
	clients              map[string]*backends.Client // backend id -> client
	// profiled is the model's offline profile (profiledIn): its backends'
	// pace is measured against it.
	profiled        func(hardware string, batch, concurrency int) time.Duration
	budget          time.Duration
	slack           time.Duration
	wcl             time.Duration
	minDuration     time.Duration // the shortest batch duration of the module's groups
	tail            time.Duration // the longest path of minDurations after this module to a sink
	times           dispatcher.ModuleTimes
	stage           dispatcher.Stage // this module and the session's modules after it
	capacity        float64          // planned req/s the module's machines serve
	countsQueue     bool             // Estimate adds Little's law's drain time (no admission at Submit)
	outstanding     atomic.Int64
	items           sync.Pool
	itemDone        func(*dispatcher.Item)
	inputs, outputs []gateway.TensorMeta
	hasMeta         bool
	metrics         *metrics.ModuleMetrics // nil: none recorded
	h               *Health
	health          map[string]*backendHealth // backend id -> its health; immutable
	race            int                       // machines each batch runs on at once (api.ModulePlan.Race; ≤ 1: one)
	// local: LiveOptions.Locality is on (inputs held on a batch's backend
	// are named); holdMin: this module's outputs feed another, and those of
	// at least holdMin bytes are held (0: none). Immutable.
	local   bool
	holdMin int
	// device is the device time the backends reported for the module's
	// batches, in machine-nanoseconds (compute over the slot's lanes), by
	// hardware type: hardware -> *atomic.Int64. Per batch: one map load, one
	// atomic add (metrics.GatewayDeviceMachineSecondsTotal).
	device sync.Map
	// owner is the runner that closes the module and counts its outstanding
	// items for its drain: the runner that built it, until a later runner
	// keeps it (keptSession) and LiveSwitch.apply hands it over (own) once
	// that runner is live.
	owner atomic.Pointer[LiveRunner]
}

// NewLiveRunner places plan on cfg's static backends (Place), loads every module's
// model on its backends with the largest batch and concurrency any of its groups
// there needs (RepositoryModelLoad), and builds one dispatcher per module.
// Sessions whose plan failed are served with ErrUnavailable naming the reason.
func NewLiveRunner(ctx context.Context, cfg *api.Config, plan *api.Plan, opts LiveOptions) (*LiveRunner, error) {
	return newLiveRunner(ctx, cfg, plan, opts, nil)
}

// newLiveRunner is NewLiveRunner replacing prev (nil: none): a module prev
// also serves starts from prev's arrival-gap estimate (FlushIdle), so a
// re-plan does not make the next requests at low load wait for batch-mates.
func newLiveRunner(ctx context.Context, cfg *api.Config, plan *api.Plan, opts LiveOptions, prev *LiveRunner) (*LiveRunner, error) {
	if plan == nil {
		return nil, errors.New("dataplane: NewLiveRunner needs a plan")
	}
	placed, _, err := placement.Place(plan, placement.Members(cfg.Backends), nil, placement.Options{Static: true, Chains: opts.Locality > 0})
	if err != nil {
		return nil, err
	}
	addr := map[string]string{}
	for _, b := range cfg.Backends {
		addr[b.ID] = b.Address
	}
	r := &LiveRunner{sessions: map[string]map[string]*liveModule{}, failed: map[string]string{}, loaded: map[modelAt]bool{}, pool: opts.Clients,
		cfg: cfg, plans: map[string]*api.SessionPlan{}, replaced: make(chan struct{})}
	if r.pool == nil {
		r.pool, r.ownPool = NewPool(), true
	}
	if opts.BackendTLS != nil {
		r.pool.SetTLS(opts.BackendTLS)
	}
	for _, b := range cfg.Backends {
		// The gateway decides (BackendTLSMode); the backend's entry only
		// when it prefers to leave it to the backend.
		if opts.BackendTLSMode == BackendTLSRequired || (b.TLS && opts.BackendTLSMode != BackendTLSOff) {
			r.pool.UseTLS(b.Address) // before any client of it is made below
		}
	}
	r.health = opts.Health
	if r.health == nil {
		r.health, r.ownHealth = NewHealth(opts.healthOptions()), true
	}
	fail := func(err error) (*LiveRunner, error) {
		r.Close()
		if len(r.loaded) > 0 {
			return nil, &partialLoadError{err: err, loaded: r.loaded}
		}
		return nil, err
	}
	type loadKey struct{ backend, model string }
	loads := map[loadKey][2]int{} // batch, concurrency
	for i := range placed.Sessions {
		sp := &placed.Sessions[i]
		if sp.Error != "" {
			r.failed[sp.Name] = sp.Error
			continue
		}
		r.plans[sp.Name] = sp
		if mods := prev.keptSession(cfg, sp); mods != nil {
			r.sessions[sp.Name] = mods
			r.kept = append(r.kept, sp.Name)
			for _, lm := range mods {
				for _, c := range lm.clients { // the plan's backends and the spares prev loaded
					r.loaded[modelAt{c.Addr(), lm.model}] = true
				}
			}
			continue
		}
		mods := map[string]*liveModule{}
		r.sessions[sp.Name] = mods
		for _, mp := range sp.Modules {
			lm := &liveModule{session: sp.Name, name: mp.Name, model: mp.Model, clients: map[string]*backends.Client{},
				h: r.health, health: map[string]*backendHealth{},
				budget: time.Duration(mp.BudgetMs * float64(time.Millisecond)),
				wcl:    time.Duration(mp.WCLMs * float64(time.Millisecond)), race: mp.Race, local: opts.Locality > 0}
			if lm.local && feedsAnother(sp, mp.Name) {
				lm.holdMin = opts.Locality
			}
			lm.itemDone = lm.finish
			lm.owner.Store(r)
			lm.metrics = opts.Metrics.Module(sp.Name, mp.Name)
			lm.countsQueue = !opts.Admission
			switch {
			case opts.SlackFraction == 0:
				lm.slack = lm.budget / 10
			case opts.SlackFraction > 0:
				lm.slack = time.Duration(float64(lm.budget) * opts.SlackFraction)
			}
			if lm.wcl > 0 {
				// No more than the plan's headroom: a deadline flush earlier
				// than budget − WCL cannot fill the planned batch at the
				// planned rate, and the module runs below its capacity.
				lm.slack = min(lm.slack, max(lm.budget-lm.wcl, 0))
			}
			for _, g := range mp.Configs {
				// A fractional machine is placed on a whole backend, which serves
				// at its full throughput unless shared.
				lm.capacity += g.Throughput * math.Ceil(g.Machines-1e-9)
				if d := time.Duration(g.DurationMs * float64(time.Millisecond)); lm.minDuration == 0 || d < lm.minDuration {
					lm.minDuration = d
				}
				for _, id := range g.Backends {
					a, ok := addr[id]
					if !ok {
						return fail(fmt.Errorf("session %q module %q: plan names backend %q, which is not in the config", sp.Name, mp.Name, id))
					}
					c, err := r.pool.Client(a)
					if err != nil {
						return fail(fmt.Errorf("session %q module %q: backend %q: %w", sp.Name, mp.Name, id, err))
					}
					lm.clients[id] = c
					lm.health[id] = r.health.entry(id)
					k := loadKey{id, mp.Model}
					l := loads[k]
					loads[k] = [2]int{max(l[0], g.Batch), max(l[1], g.Concurrency, 1)}
				}
			}
			var gap time.Duration
			if p := prev.moduleOrNil(sp.Name, mp.Name); p != nil {
				gap = p.disp.ArrivalGap()
			}
			lm.profiled = profiledIn(cfg, mp.Model)
			d, err := dispatcher.New(mp, dispatcher.Options{Policy: opts.Policy, Flush: opts.Flush, ArrivalGap: gap, Sender: lm, Health: r.health, Devices: r.health,
				Admission: opts.Admission, HandoffMargin: handoffMarginOf(cfg, sp.Name, mp.Name), Profiled: lm.profiled, Locality: lm.local, LateCommit: opts.LateCommit})
			if err != nil {
				return fail(fmt.Errorf("session %q: %w", sp.Name, err))
			}
			lm.disp = d
			r.health.attach(d)
			mods[mp.Name] = lm
		}
		setTails(sp.Modules, mods, opts.InvocationSlack)
	}
	seen := map[*backendHealth]bool{}
	for _, mods := range r.sessions { // kept ones too: this runner sends to their backends
		for _, lm := range mods {
			for _, bh := range lm.health {
				if !seen[bh] {
					seen[bh] = true
					bh.refs.Add(1)
					r.used = append(r.used, bh)
					if bh.Down() {
						r.health.startProbe(bh) // ejected before; its probe may have stopped while no runner used it
					}
				}
			}
		}
	}
	timeout := opts.LoadTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	keys := make([]loadKey, 0, len(loads))
	for k := range loads {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].backend < keys[j].backend || keys[i].backend == keys[j].backend && keys[i].model < keys[j].model
	})
	meta := map[string]backends.ModelInfo{}
	for _, k := range keys {
		c, _ := r.pool.Client(addr[k.backend])
		l := loads[k]
		if err := c.Load(lctx, k.model, l[0], l[1]); err != nil {
			if ejects(err) { // dead: out of the table, probed until back (and left out of the next placement)
				r.health.eject(r.health.locate(k.backend, r.pool, addr[k.backend]), err, time.Now())
			}
			return fail(fmt.Errorf("load model %q on backend %q (batch %d, concurrency %d): %w", k.model, k.backend, l[0], l[1], err))
		}
		r.loaded[modelAt{addr[k.backend], k.model}] = true
		r.health.track(k.backend, r.pool, addr[k.backend], k.model, l[0], l[1])
		if _, ok := meta[k.model]; !ok {
			if info, err := c.Metadata(lctx, k.model); err == nil {
				meta[k.model] = info
			}
		}
	}
	var spares map[*liveModule][]dispatcher.Slot
	if opts.Spare {
		spares = r.attachSpares(lctx, cfg, placed, opts.Logger)
	}
	r.warmUp(lctx, placed, spares, prev, opts.Logger)
	for _, mods := range r.sessions {
		for _, lm := range mods {
			if lm.owner.Load() != r {
				continue // kept: set when prev built it, and requests read it now
			}
			if info, ok := meta[lm.model]; ok {
				lm.inputs, lm.outputs, lm.hasMeta = specsToMeta(info.Inputs), specsToMeta(info.Outputs), true
			}
		}
	}
	return r, nil
}

func specsToMeta(specs []backends.TensorSpec) []gateway.TensorMeta {
	out := make([]gateway.TensorMeta, len(specs))
	for i, s := range specs {
		out[i] = gateway.TensorMeta{Name: s.Name, Datatype: s.Datatype, Shape: s.Shape}
	}
	return out
}

// Close closes every dispatcher (queued items fail with ErrUnavailable) and, if
// the runner made it, the client pool.
func (r *LiveRunner) Close() error {
	var errs []error
	for _, mods := range r.sessions {
		for _, lm := range mods {
			if lm.disp != nil && lm.owner.Load() == r { // a later runner kept the others
				r.health.detach(lm.disp)
				errs = append(errs, lm.disp.Close())
			}
		}
	}
	for _, bh := range r.used {
		bh.refs.Add(-1)
	}
	r.used = nil
	if r.ownHealth {
		r.health.Close()
	}
	if r.ownPool && r.pool != nil {
		errs = append(errs, r.pool.Close())
	}
	return errors.Join(errs...)
}

// Stats returns each module's dispatcher counters, keyed "session/module".
func (r *LiveRunner) Stats() map[string]dispatcher.Stats {
	out := map[string]dispatcher.Stats{}
	for s, mods := range r.sessions {
		for m, lm := range mods {
			out[s+"/"+m] = lm.disp.Stats()
		}
	}
	return out
}

// HandoffMargin is the admission margin (dispatcher.Options.HandoffMargin)
// of the modules a request enters its session by: 2 ms for each batch queued
// ahead. Issue 32's 4x overload (one module, 8 ms batches of 16, SLO
// 100 ms, two backends, 6,000 req/s against 1,500 planned, on a 2-core host
// beside the load generator) keeps about ten batches queued; without a
// margin one run in four had a stall of about 20 ms turn 44 admitted
// requests into 504s (3 in another); with it none in sixteen runs
// (docs/traffic.md, "Admission margin"). Later modules keep none: an item
// refused there has had its upstream work done for nothing, and the
// slowed-device step case had 504s in each of four runs with every module
// keeping one (0 in five at the same time without any).
const HandoffMargin = 2 * time.Millisecond

// handoffMarginOf returns HandoffMargin for a module of the session's that
// runs after none (a source of its DAG), else 0.
func handoffMarginOf(cfg *api.Config, session, module string) time.Duration {
	s, ok := cfg.Session(session)
	if !ok {
		return 0
	}
	if i := s.ModuleIndex(module); i >= 0 && len(s.Parents(i)) == 0 {
		return HandoffMargin
	}
	return 0
}

// keptSession returns the modules r serves session sp with when a runner
// built for cfg may keep them as they are (nil otherwise): r placed the
// session exactly as sp (every module's model, budget, groups, batch sizes,
// machines and backends), every backend sp names has the address it had,
// and the session's models have the offline profiles they had. Kept, the
// session's dispatchers go on with their queues, lanes, measured slowness
// and arrival gaps through a plan change that did not change it: a re-plan
// for another session's drift or rate no longer rebuilds every session's
// dispatchers and hands their queues over (in the demo, where the OCR
// sessions are re-planned 14-21 times a minute, paper-chain went from 36 of
// 3,039 refused to 14, the rest the door's; docs/dataplane.md, "Plan
// changes"). Until LiveSwitch.apply calls own, a kept module's owner is
// still prev: that is how the new runner tells its kept modules from its
// own. Nil r keeps nothing.
func (r *LiveRunner) keptSession(cfg *api.Config, sp *api.SessionPlan) map[string]*liveModule {
	if r == nil {
		return nil
	}
	old, mods := r.plans[sp.Name], r.sessions[sp.Name]
	if old == nil || mods == nil || !reflect.DeepEqual(old, sp) {
		return nil
	}
	was, now := addresses(r.cfg), addresses(cfg)
	for _, mp := range sp.Modules {
		for _, g := range mp.Configs {
			for _, id := range g.Backends {
				if was[id] != now[id] {
					return nil
				}
			}
		}
		if !reflect.DeepEqual(profilesOf(r.cfg, mp.Model), profilesOf(cfg, mp.Model)) {
			return nil
		}
	}
	return mods
}

// own makes r the owner of every module it serves (liveModule.owner): called
// by LiveSwitch.apply once r is live, so the runner it replaced no longer
// closes, or waits in its drain for, the modules r kept.
func (r *LiveRunner) own() {
	for _, mods := range r.sessions {
		for _, lm := range mods {
			lm.owner.Store(r)
		}
	}
}

// addresses maps cfg's backend ids to their addresses and TLS (nil cfg: none).
func addresses(cfg *api.Config) map[string]string {
	out := map[string]string{}
	if cfg == nil {
		return out
	}
	for _, b := range cfg.Backends {
		out[b.ID] = fmt.Sprintf("%s tls=%t", b.Address, b.TLS)
	}
	return out
}

// profilesOf returns cfg's offline profiles of model, in cfg's order.
func profilesOf(cfg *api.Config, model string) []api.Profile {
	var out []api.Profile
	for _, p := range cfg.Profiles {
		if p.Model == model {
			out = append(out, p)
		}
	}
	return out
}

// moduleOrNil returns the module, or nil when r is nil or does not serve it.
func (r *LiveRunner) moduleOrNil(session, module string) *liveModule {
	if r == nil {
		return nil
	}
	return r.sessions[session][module]
}

func (r *LiveRunner) module(session, module string) (*liveModule, error) {
	if lm, ok := r.sessions[session][module]; ok {
		return lm, nil
	}
	if why, ok := r.failed[session]; ok {
		// The planner's reason is made of the config (profiles, SLOs), so the client may read it.
		return nil, gateway.Public(gateway.ErrUnavailable, "%v: session %q has no plan: %s", gateway.ErrUnavailable, session, why)
	}
	return nil, fmt.Errorf("%w: session %q module %q is not in the plan", gateway.ErrUnavailable, session, module)
}

// Run submits one item to the module's dispatcher. The item's dispatch deadline
// (which times the flush of a partial batch) is the module's budget from now or
// the request's deadline, whichever is earlier, less the slack
// (LiveOptions.SlackFraction). Its expiry (when it is failed with ErrDeadline
// instead of sent) is the later of that and the request's deadline less the
// shortest time the rest of the DAG needs (this module's included) and the
// slack (docs/dataplane.md, "Module deadlines"). The request's deadline,
// priority class and abandonment flag come from call (gateway.Call); an
// abandoned item is never sent (dispatcher.Item.Abandoned).
func (r *LiveRunner) Run(ctx context.Context, session, module string, inputs []api.Tensor, call *gateway.Call,
	done func([]api.Tensor, gateway.Timing, error)) {
	lm, err := r.module(session, module)
	if err != nil {
		done(nil, gateway.Timing{}, err)
		return
	}
	li, _ := lm.items.Get().(*liveItem)
	if li == nil {
		li = &liveItem{}
	}
	it := &li.Item
	now := time.Now()
	it.Arrival, it.Inputs, it.Tag, it.Done = now, inputs, li, lm.itemDone
	it.Abandoned, it.Class = &call.Abandoned, call.Class
	if lm.local {
		it.Home = homeOf(inputs)
	}
	li.done, li.deadline = done, call.Deadline
	it.SetDeadlines(now, call.Deadline, &lm.times, lm.stage.Reserve(now))
	if tracing.Enabled() {
		li.span = tracing.StartModule(ctx, session, module, now)
	}
	lm.outstanding.Add(1)
	if err := lm.disp.Submit(it); err != nil {
		lm.outstanding.Add(-1)
		if li.span != nil {
			tracing.EndModule(li.span, now, time.Time{}, time.Time{}, err)
		}
		*li = liveItem{}
		lm.items.Put(li)
		done(nil, gateway.Timing{}, mapBackendError(err)) // the DAG runner names the module
	}
}

// feedsAnother reports whether module's outputs are another module's inputs
// in sp.
func feedsAnother(sp *api.SessionPlan, module string) bool {
	for _, mp := range sp.Modules {
		for _, a := range mp.After {
			if a == module {
				return true
			}
		}
	}
	return false
}

// profiledIn returns model's offline profile in cfg as a lookup by
// hardware, batch size and concurrency (0: not profiled): what a backend's
// pace is measured against (Health.paced, dispatcher.Options.Profiled).
func profiledIn(cfg *api.Config, model string) func(hardware string, batch, concurrency int) time.Duration {
	type key struct {
		hw   string
		b, c int
	}
	m := map[key]time.Duration{}
	for _, p := range cfg.Profiles {
		if p.Model != model {
			continue
		}
		for _, e := range p.Entries {
			m[key{p.Hardware, e.Batch, max(e.Concurrency, 1)}] = time.Duration(e.Duration)
		}
	}
	return func(hw string, batch, concurrency int) time.Duration { return m[key{hw, batch, max(concurrency, 1)}] }
}

// profiledAt returns the offline profile's duration of slot s's config (0:
// unknown).
func (lm *liveModule) profiledAt(s *dispatcher.Slot) time.Duration {
	if lm.profiled == nil {
		return 0
	}
	return lm.profiled(s.Hardware, s.Batch, s.Concurrency)
}

// Abandon implements gateway.Abandoner: the module's dispatcher takes the
// abandoned items out of its queues (dispatcher.Sweep).
func (r *LiveRunner) Abandon(session, module string) {
	if lm := r.moduleOrNil(session, module); lm != nil {
		lm.disp.Sweep()
	}
}

// liveItem is a dispatcher item with the DAGRunner's callback and an error of its
// own (the dispatcher applies one error to a whole batch; a Sender that ran items
// separately sets err on the ones that failed). Pooled per module.
type liveItem struct {
	dispatcher.Item
	done     func([]api.Tensor, gateway.Timing, error)
	deadline time.Time // the request's end-to-end deadline: bounds the backend call
	err      error
	span     trace.Span // the item's module span when its request is traced (package tracing)
}

// finish is every item's Done: it reports the outcome to the DAGRunner and
// recycles the item.
func (lm *liveModule) finish(it *dispatcher.Item) {
	lm.outstanding.Add(-1)
	li := it.Tag.(*liveItem)
	done := li.done
	var t gateway.Timing
	if !it.Sent.IsZero() {
		t = gateway.Timing{Queue: it.Sent.Sub(it.Arrival), Compute: it.Finished.Sub(it.Sent)}
		lm.metrics.Item(t.Queue, t.Compute)
	}
	out, err := it.Outputs, it.Err
	if err == nil {
		err = li.err
	}
	if li.span != nil {
		tracing.EndModule(li.span, it.Arrival, it.Sent, it.Finished, err)
	}
	*li = liveItem{}
	lm.items.Put(li)
	if err != nil {
		out, err = nil, mapBackendError(err)
	}
	done(out, t, err)
}

// setTails sets each module's tail (the longest path, in shortest batch
// durations, from the module's children to a sink of the session's DAG,
// which the config loader checked is acyclic), its item times (with
// invocation, the path budget of Llama's per-invocation slack), and its
// stage: its dispatcher and the stages of its children.
func setTails(modules []api.ModulePlan, mods map[string]*liveModule, invocation bool) {
	sp := &api.SessionPlan{Modules: modules}
	rest, err := sp.ShortestRest()
	if err != nil {
		return // unreachable: the config loader rejects cycles
	}
	var paths []time.Duration
	if invocation {
		paths, _ = sp.BudgetRest()
	}
	for i, mp := range modules {
		if lm := mods[mp.Name]; lm != nil {
			lm.tail = rest[i] - lm.minDuration
			lm.times = dispatcher.ModuleTimes{Budget: lm.budget, Slack: lm.slack, Shortest: lm.minDuration, Tail: lm.tail}
			if paths != nil {
				lm.times.PathBudget = paths[i]
			}
			lm.stage.D = lm.disp
		}
	}
	for _, mp := range modules {
		for _, p := range mp.After {
			if parent, lm := mods[p], mods[mp.Name]; parent != nil && lm != nil {
				parent.stage.Next = append(parent.stage.Next, &lm.stage)
			}
		}
	}
}

// partialLoadError is NewLiveRunner's error after it loaded some models and
// then failed: loaded says which, so that a LiveSwitch can unload those no
// runner of its uses (NewLiveRunner cannot tell: a model may already be loaded
// there for the plan being served).
type partialLoadError struct {
	err    error
	loaded map[modelAt]bool
}

func (e *partialLoadError) Error() string { return e.err.Error() }
func (e *partialLoadError) Unwrap() error { return e.err }

// Estimate is a lower bound on how long an item submitted now takes in the module:
// the shortest batch duration of its groups; without the dispatchers' admission
// (LiveOptions.Admission false), plus the time its machines need to drain the
// items beyond what the plan expects in flight (Little's law: capacity × WCL).
// The DAG runner sums it along the session's longest path, so it must stay a
// lower bound: a downstream module's queue now says little about its queue
// when the item gets there, and summing each module's dispatcher.Predict
// refused requests the plan serves. With admission the exact check is the
// dispatcher's own, at each module's Submit, and Little's law is left out: it
// counts the plan's machines only, not the spare ones a saturated module
// overflows to, and refused at the gateway what the spares serve (a burst
// window of the demo's chain, mean-rate plan with spares: 59% within the SLO,
// 40% refused, against 99% simulated; docs/traffic.md). The WCL itself is a
// worst case, and rejecting on it turned away requests the system would have
// served (the demo lost 5% of its requests that way).
// FannedOut implements gateway.FanOutObserver: one fan-out of module's,
// items items from one parent item, on its piccolo_gateway_fanout_items.
func (r *LiveRunner) FannedOut(session, module string, items int) {
	if lm, ok := r.sessions[session][module]; ok {
		lm.metrics.FanOut(items)
	}
}

func (r *LiveRunner) Estimate(session, module string) time.Duration {
	lm, ok := r.sessions[session][module]
	if !ok {
		return 0
	}
	if !lm.countsQueue || lm.capacity <= 0 {
		return lm.minDuration
	}
	excess := float64(lm.outstanding.Load()) - lm.capacity*lm.wcl.Seconds()
	if excess <= 0 {
		return lm.minDuration
	}
	return lm.minDuration + time.Duration(excess/lm.capacity*float64(time.Second))
}

// ModuleMetadata returns the module's model's tensors as its backend reported them.
func (r *LiveRunner) ModuleMetadata(session, module string) (inputs, outputs []gateway.TensorMeta, ok bool) {
	lm, found := r.sessions[session][module]
	if !found || !lm.hasMeta {
		return nil, nil, false
	}
	return lm.inputs, lm.outputs, true
}

// Send runs a batch on its slot's backend on a goroutine of its own (Send must not
// block). Dummies pad the batch with copies of the first item's inputs; their
// outputs are dropped. Items whose tensors cannot be stacked together (different
// names, datatypes or trailing dimensions) go in separate calls, and when the
// backend rejects a batch of several items as invalid, each item is retried alone,
// so one bad request never fails another.
func (lm *liveModule) Send(b *dispatcher.Batch) { go lm.send(b) }

func (lm *liveModule) send(b *dispatcher.Batch) {
	// A panic while the batch is sent fails its items with ErrInternal
	// (api.Recovered), once: a panic in b.Done itself (the requests' own
	// callbacks) is reported but not answered again.
	doneCalled := false
	defer func() {
		if v := recover(); v != nil {
			err := api.Recovered("batch", v)
			if !doneCalled {
				b.Done(nil, err)
			}
		}
	}()
	lm.metrics.Batch(len(b.Items) + b.Dummies)
	c := lm.clients[b.Slot.Backend]
	if c == nil {
		doneCalled = true
		b.Done(nil, fmt.Errorf("%w: module %q: slot %s has no backend client", gateway.ErrUnavailable, lm.name, b.Slot))
		return
	}
	var latest, oldest time.Time
	var first *dispatcher.Item // the item of the oldest request deadline
	for _, it := range b.Items {
		dl := it.Tag.(*liveItem).deadline
		if dl.After(latest) {
			latest = dl
		}
		if !dl.IsZero() && (oldest.IsZero() || dl.Before(oldest)) {
			oldest, first = dl, it
		}
	}
	if latest.IsZero() {
		latest = time.Now().Add(gateway.DefaultTimeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	var span trace.Span
	if tracing.Enabled() {
		ctx, span = lm.startBatch(ctx, b, c.Addr())
	}
	items := make([][]api.Tensor, len(b.Items), len(b.Items)+b.Dummies)
	for i, it := range b.Items {
		items[i] = it.Inputs
	}
	out, errs, err := lm.run(ctx, b.Slot, c, items, b.Dummies, latest, b.Wait())
	if first != nil {
		if end := time.Now(); end.After(oldest) {
			lm.noteLate(b, first, end, oldest, err)
		}
	}
	if span != nil {
		tracing.EndBatch(span, err)
	}
	if err == nil {
		for i, e := range errs {
			if e != nil {
				b.Items[i].Tag.(*liveItem).err = e
			}
		}
	}
	doneCalled = true
	b.Done(out, err)
}

// inferRecovered is infer on a goroutine of its own: a panic in it becomes
// the whole call's error (api.Recovered) instead of ending the process.
func (lm *liveModule) inferRecovered(ctx context.Context, c *backends.Client, backend string, items [][]api.Tensor, dummies int) (out [][]api.Tensor, errs []error, tm backends.Timing, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, errs, tm, err = nil, nil, backends.Timing{}, api.Recovered("batch", v)
		}
	}()
	return lm.infer(ctx, c, backend, items, dummies)
}

// startBatch starts the batch's span, linked to the module spans of its traced
// items, and links each of those back to it (nil: no item is traced).
func (lm *liveModule) startBatch(ctx context.Context, b *dispatcher.Batch, backend string) (context.Context, trace.Span) {
	var links []trace.Link
	for _, it := range b.Items {
		if s := it.Tag.(*liveItem).span; s != nil {
			links = append(links, trace.Link{SpanContext: s.SpanContext()})
		}
	}
	ctx, span := tracing.StartBatch(ctx, lm.name, backend, len(b.Items), b.Dummies, links)
	if span != nil {
		l := trace.Link{SpanContext: span.SpanContext()}
		for _, it := range b.Items {
			if s := it.Tag.(*liveItem).span; s != nil {
				s.AddLink(l)
			}
		}
	}
	return ctx, span
}

// infer runs items (plus dummies) in as few ModelInfer calls as stacking allows,
// on c, the client of backend (its placement id: the locality's). err is set
// when the whole batch failed; otherwise errs[i] (when errs is not nil)
// is item i's own failure. tm is the backend's Timing of the one call a batch
// that stacks makes (zero, not reported, for a batch split into calls).
func (lm *liveModule) infer(ctx context.Context, c *backends.Client, backend string, items [][]api.Tensor, dummies int) (out [][]api.Tensor, errs []error, tm backends.Timing, err error) {
	groups := stackGroups(items)
	if len(groups) == 1 {
		all := items
		for range dummies {
			all = append(all, items[0])
		}
		loc := lm.locality(backend)
		out, tm, err := c.InferLocal(ctx, lm.model, all, loc)
		if errors.Is(err, backends.ErrHeldMissing) { // dropped there: nothing ran; send the bytes
			loc.Backend = ""
			out, tm, err = c.InferLocal(ctx, lm.model, all, loc)
		}
		if err != nil && len(items) > 1 && errors.Is(err, backends.ErrInvalidInput) {
			out, errs, err := lm.inferEach(ctx, c, items)
			return out, errs, backends.Timing{}, err
		}
		if err != nil {
			return nil, nil, backends.Timing{}, err
		}
		return out[:len(items)], nil, tm, nil
	}
	out = make([][]api.Tensor, len(items))
	errs = make([]error, len(items))
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := make([][]api.Tensor, len(g))
			for i, idx := range g {
				sub[i] = items[idx]
			}
			res, subErrs, _, err := lm.inferRecovered(ctx, c, backend, sub, 0)
			for i, idx := range g {
				switch {
				case err != nil:
					errs[idx] = err
				case subErrs != nil && subErrs[i] != nil:
					errs[idx] = subErrs[i]
				default:
					out[idx] = res[i]
				}
			}
		}()
	}
	wg.Wait()
	return out, errs, backends.Timing{}, nil
}

// inferEach runs every item alone, so that one item the backend rejects does not
// fail the others.
func (lm *liveModule) inferEach(ctx context.Context, c *backends.Client, items [][]api.Tensor) ([][]api.Tensor, []error, error) {
	out := make([][]api.Tensor, len(items))
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if v := recover(); v != nil {
					errs[i] = api.Recovered("batch", v)
				}
			}()
			res, err := c.Infer(ctx, lm.model, items[i:i+1])
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = res[0]
		}()
	}
	wg.Wait()
	return out, errs, nil
}

// stackGroups partitions items into groups that can be stacked in one call:
// same input names, datatypes and dimensions after dimension 0. The common case,
// one group, allocates one small slice.
func stackGroups(items [][]api.Tensor) [][]int {
	if len(items) <= 1 || allStackable(items) {
		return [][]int{nil}
	}
	var groups [][]int
next:
	for i := range items {
		for gi, g := range groups {
			if api.CanBatch(items[g[0]], items[i]) == nil {
				groups[gi] = append(g, i)
				continue next
			}
		}
		groups = append(groups, []int{i})
	}
	return groups
}

func allStackable(items [][]api.Tensor) bool {
	for _, it := range items[1:] {
		if api.CanBatch(items[0], it) != nil {
			return false
		}
	}
	return true
}

// mapBackendError wraps err, from the dispatcher or the backend client, with the
// gateway sentinel the edge maps to a status. The dispatcher's ErrDeadline,
// ErrOverloaded and ErrCancelled already wrap the gateway's (api's) and pass
// as they are.
func mapBackendError(err error) error {
	var sentinel error
	switch {
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, gateway.ErrDeadline):
		sentinel = gateway.ErrDeadline
	case errors.Is(err, backends.ErrInvalidInput):
		sentinel = gateway.ErrBadInput
	case errors.Is(err, dispatcher.ErrClosed), errors.Is(err, backends.ErrBackendUnavailable),
		errors.Is(err, backends.ErrModelNotLoaded), errors.Is(err, backends.ErrUnknownModel),
		errors.Is(err, backends.ErrBackendOverloaded), errors.Is(err, backends.ErrPoolClosed):
		sentinel = gateway.ErrUnavailable
	case errors.Is(err, gateway.ErrUnavailable), errors.Is(err, gateway.ErrBackend), errors.Is(err, gateway.ErrDeadline),
		errors.Is(err, gateway.ErrBadInput), errors.Is(err, gateway.ErrOverloaded), errors.Is(err, gateway.ErrCancelled):
		return err
	default:
		sentinel = gateway.ErrBackend
	}
	if strings.HasPrefix(err.Error(), sentinel.Error()) { // "overloaded: overloaded: ..." says it twice
		return wrapped{sentinel, err}
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// wrapped is err, which already says what sentinel says, wrapping both.
type wrapped struct{ sentinel, err error }

func (w wrapped) Error() string   { return w.err.Error() }
func (w wrapped) Unwrap() []error { return []error{w.sentinel, w.err} }
