package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Options choose the load and the dispatch policy of a simulation.
type Options struct {
	// Policy is the dispatch policy; nil means dispatcher.TC.
	Policy dispatcher.Policy
	// Flush is the flush rule: nil means dispatcher.FlushDeadline; also
	// dispatcher.FlushIdle or any other dispatcher.Flush.
	Flush dispatcher.Flush
	// Arrival is the arrival process: constant (default), poisson, gamma, mmpp or
	// trace (arrival.Kinds).
	Arrival string
	// Arrivals is where Arrival is looked up; nil: arrival.Builtin.
	Arrivals *registry.Registry[arrival.Kind]
	// CV2 is the squared coefficient of variation of gamma arrivals.
	CV2 float64
	// MMPP holds the parameters of Arrival "mmpp"; Trace is what Arrival "trace"
	// replays (offsets from its first arrival, skip and speed applied).
	MMPP  arrival.MMPP
	Trace *arrival.Trace
	// Session names the session an mmpp or trace process drives (default: the
	// first planned session); its request rate is the process's mean, and the
	// other sessions arrive as Poisson at their planned rates. A trace's
	// arrivals end with it: the drain then has no load behind it.
	Session string
	// RatePerSec, if > 0, replaces every session's request rate (req/s); module
	// rates scale with it. The plan's machines and dummy rates stay as planned.
	RatePerSec float64
	// Duration is how long requests arrive (virtual time). Required, except with
	// a trace, whose whole span it then is.
	Duration time.Duration
	// MaxItems, when > 0, bounds the work: Duration is shortened so that the
	// arrivals at the plan's module rates are at most MaxItems module items
	// (BurstWindow), so a plan at 150,000 req/s simulates as many items as
	// one at 50 req/s does in a tenth of the time, not 3,000× more. Not with
	// a trace, whose arrivals are given.
	MaxItems int
	// Seed seeds the arrival processes and the jitter.
	Seed uint64
	// Jitter, in [0, 1), makes each batch last its profiled duration × (1 ± Jitter),
	// uniformly; 0 runs every batch for exactly its profiled duration.
	Jitter float64
	// Admission turns on the dispatcher's admission (dispatcher.Options.Admission):
	// an item that would complete after its module deadline is refused at
	// Submit. A request so refused is counted as refused (SessionReport.Refused),
	// not as an error, and its later modules do not run.
	Admission bool
	// InvocationSlack times each item's flush deadline by Llama's
	// per-invocation slack (dispatcher.ModuleTimes.PathBudget), as the
	// gateway's --invocation-slack does. With Admission only: without it,
	// items keep the paper's module deadlines.
	InvocationSlack bool
	// LateCommit sends a batch that would end late on its group's machine to
	// an idle machine of another of the module's groups that ends it in
	// time (dispatcher.Options.LateCommit), as the gateway's --late-commit
	// does.
	LateCommit bool
	// Spare are machines outside the plan that a module's batches may
	// overflow to (dispatcher.SetSpare): each applies to the module its
	// Slot.Module names. Slots naming one backend (the same idle backend
	// spare for several modules, as the gateway gives it) run on one device,
	// FIFO over its lanes, as live.
	Spare []dispatcher.Slot
	// Changes switch the served plan during the run, in time order: at At
	// (virtual time from the start of the arrivals) every module of the
	// change's plan replaces the running plan's module of the same session
	// and name, as the gateway's plan switch does (dispatcher.SetPlan:
	// queued items move to the new plan's machines, batches already sent
	// finish where they were sent; the new machines start idle). Every
	// planned session of the plan must be in each change's plan, module for
	// module. Only unplaced plans (no backends; `--place=false`): a change
	// is not placed again. What a control loop decides from the arrivals
	// alone (evaluation.Tuning) is simulated this way.
	Changes []PlanChange
	// PerSecond splits each session's measured requests by the second they
	// arrived in (SessionReport.Seconds).
	PerSecond bool
	// Drain bounds the virtual time given, after arrivals stop, to requests still
	// in flight (default: 10 s plus 10 × the largest SLO). Requests unfinished by
	// then count as errors of kind "unfinished".
	Drain time.Duration
}

// PlanChange is one plan switch of Options.Changes.
type PlanChange struct {
	At   time.Duration // from the start of the arrivals
	Plan *api.Plan
}

// Error kinds in reports.
const (
	KindDeadline   = "deadline"
	KindClosed     = "closed"
	KindSender     = "sender"
	KindUnfinished = "unfinished"
	// KindRefused is a request refused at once by admission (Options.Admission).
	// It is counted in SessionReport.Refused, not in Errors.
	KindRefused = "refused"
)

var start = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Run simulates every planned session of plan (sessions with an Error are reported
// as skipped) under the load in o, with the real dispatcher on a virtual clock, and
// returns the report. Errors name the bad option or plan field.
func Run(plan *api.Plan, o Options) (*Report, error) {
	if plan == nil {
		return nil, errors.New("simulate: no plan")
	}
	if o.Policy == nil {
		o.Policy = dispatcher.TC{}
	}
	if o.Flush == nil {
		o.Flush = dispatcher.FlushDeadline
	}
	if o.Arrival == "" {
		o.Arrival = "constant"
	}
	switch {
	case o.Arrival == "mmpp":
		if err := o.MMPP.Validate(); err != nil {
			return nil, err
		}
	case o.Arrival == "trace" && (o.Trace == nil || len(o.Trace.Offsets) == 0):
		return nil, fmt.Errorf("trace arrivals: no trace given; a trace is %s", arrival.TraceFormats)
	}
	if o.Arrival == "trace" && o.Duration == 0 {
		o.Duration = o.Trace.Span() + 1 // the window is [0, Duration): the last arrival is in
	}
	if o.Duration <= 0 {
		return nil, fmt.Errorf("duration %v: must be > 0", o.Duration)
	}
	if o.MaxItems < 0 {
		return nil, fmt.Errorf("max items %d: must be ≥ 0 (0: no bound)", o.MaxItems)
	}
	if o.MaxItems > 0 && o.Arrival != "trace" {
		o.Duration = min(o.Duration, BurstWindow(plan, o.MaxItems))
	}
	if o.RatePerSec < 0 || math.IsNaN(o.RatePerSec) || math.IsInf(o.RatePerSec, 0) {
		return nil, fmt.Errorf("rate %v req/s: must be a finite number ≥ 0 (0: the plan's rates)", o.RatePerSec)
	}
	if o.Jitter < 0 || o.Jitter >= 1 || math.IsNaN(o.Jitter) {
		return nil, fmt.Errorf("jitter %v: must be in [0, 1)", o.Jitter)
	}
	if err := checkChanges(plan, o.Changes); err != nil {
		return nil, err
	}
	wall := time.Now()
	s, err := newSim(plan, o)
	if err != nil {
		return nil, err
	}
	s.run()
	if s.changeErr != nil {
		return nil, s.changeErr
	}
	r := s.report()
	r.WallMs = float64(time.Since(wall).Microseconds()) / 1000
	return r, nil
}

type sim struct {
	o        Options
	plan     *api.Plan
	clock    *dispatcher.VirtualClock
	sender   *sender
	sessions []*session
	skipped  []SessionReport
	end      time.Time
	live     int // requests not finished
	itemFree []*simItem
	reqFree  []*request
	itemDone func(*dispatcher.Item)
	devTable dispatcher.DeviceTable // nil: the plan is not placed
	// changeErr is the first plan change a dispatcher refused (Options.Changes).
	changeErr error
}

type session struct {
	sim     *sim
	plan    *api.SessionPlan
	rate    float64
	proc    arrival.Process
	timer   dispatcher.Timer
	mods    []*module
	order   []int // topological
	sources []int
	slo     time.Duration
	lat     []time.Duration
	arrived int
	good    int
	refused int // measured requests refused by admission
	errs    map[string]int
	seconds []SecondCount // with Options.PerSecond: by arrival second
	// lanes is the number of racing branches into anyof modules (0: the
	// session has none); sinks the number of modules nothing runs after.
	// With anyof a request ends when its sinks do: the losing branches'
	// batches already sent run on, and the request is released after them.
	lanes, sinks int
	laneMods     [][]int
	rng          *rand.Rand // fan-out draws (module.fanOut)
	tailRng      *rand.Rand // slow-batch draws (moduleSender), made on first use
	index        uint64     // in the plan's sessions: seeds the draws
}

// tailDraws returns the session's source of slow-batch draws (a module's
// api.Tail), seeded apart from the fan-out draws and the jitter.
func (ss *session) tailDraws() *rand.Rand {
	if ss.tailRng == nil {
		ss.tailRng = rand.New(rand.NewPCG(ss.sim.o.Seed^0xbb67ae8584caa73b, ss.index))
	}
	return ss.tailRng
}

type module struct {
	plan     *api.ModulePlan
	d        *dispatcher.Dispatcher
	send     *moduleSender // its batches' durations: tail and race
	children []int
	parents  int
	primary  int     // parent whose item count drives this module's; -1: a source
	ratio    float64 // items per primary-parent item (sources: per request)
	acc      float64
	// fanOut, when set (api.ModulePlan.FanOut), draws each primary-parent
	// item's items from the distribution instead of ratio; cum is its
	// cumulative shares.
	fanOut   api.FanOut
	cum      []float64
	budget   time.Duration
	times    dispatcher.ModuleTimes
	stage    *dispatcher.Stage
	wcl      time.Duration
	lat      []time.Duration
	groupMax []time.Duration
	groupN   []int
	good     int
	overWCL  int
	refused  int // measured items refused by admission
	errs     map[string]int
	// anyOf: the module starts on the first of its parents to finish
	// (api.JoinAnyOf); raced[k] is the racing branch (lane) its parent k
	// ends. lane is the branch this module is on, -1 for none.
	anyOf bool
	raced []int
	lane  int
	sink  bool
}

type request struct {
	s        *session
	arrival  time.Time
	count    []int // items of each module
	left     []int // items of each module not yet done
	wait     []int // parents of each module not yet done
	inflight int   // items in flight, plus one while the request is being advanced
	failed   string
	measured bool // arrived within the measured window [0, Duration)
	// cut[l] is set when racing branch l lost its anyof join: its items
	// still queued are swept (dispatcher.Item.Abandoned), its modules not
	// yet started never start. sinksLeft counts the sinks not yet done and
	// doneAt is when the last one was (sessions with anyof only).
	cut       []atomic.Bool
	sinksLeft int
	doneAt    time.Time
}

type simItem struct {
	it  dispatcher.Item
	req *request
	mod int
}

func newSim(plan *api.Plan, o Options) (*sim, error) {
	s := &sim{o: o, plan: plan, clock: dispatcher.NewVirtualClock(start)}
	s.end = start.Add(o.Duration)
	s.sender = &sender{clock: s.clock, jitter: o.Jitter, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))}
	devs, err := devicesOf(plan, o.Spare)
	if err != nil {
		return nil, err
	}
	s.sender.devs = devs
	if devs != nil { // a placed plan: dispatchers of modules sharing a device see each other's batches there, as live
		s.devTable = &dispatcher.Devices{}
	}
	s.itemDone = s.onItemDone
	driven := -1 // the session an mmpp or trace process (one of its own rate) drives
	if k, err := arrival.Lookup(o.Arrivals, o.Arrival); err == nil && k.OwnRate() {
		var names []string
		for si := range plan.Sessions {
			sp := &plan.Sessions[si]
			if sp.Error != "" || len(sp.Modules) == 0 {
				continue
			}
			names = append(names, sp.Name)
			if driven < 0 && (o.Session == "" || o.Session == sp.Name) {
				driven = si
			}
		}
		if driven < 0 && len(names) > 0 {
			return nil, fmt.Errorf("session %q: not a planned session of the plan; planned: %s", o.Session, strings.Join(names, ", "))
		}
	}
	for si := range plan.Sessions {
		sp := &plan.Sessions[si]
		if sp.Error != "" || len(sp.Modules) == 0 {
			why := sp.Error
			if why == "" {
				why = "no modules"
			}
			s.skipped = append(s.skipped, SessionReport{Name: sp.Name, SLOMs: sp.SLOMs, Skipped: why})
			continue
		}
		ss, err := s.newSession(sp, uint64(si), driven < 0 || si == driven)
		if err != nil {
			return nil, fmt.Errorf("session %q: %w", sp.Name, err)
		}
		s.sessions = append(s.sessions, ss)
	}
	if len(s.sessions) == 0 {
		return nil, errors.New("simulate: the plan has no session to simulate")
	}
	return s, nil
}

// newSession builds the session of sp; driven says whether Options.Arrival drives
// it (false: an mmpp or trace process drives another session, this one is Poisson).
func (s *sim) newSession(sp *api.SessionPlan, index uint64, driven bool) (*session, error) {
	// The DAG helpers live on api.Session: build one from the plan's names.
	dag := api.Session{Name: sp.Name}
	for _, mp := range sp.Modules {
		dag.Modules = append(dag.Modules, api.Module{Name: mp.Name, After: mp.After, Join: mp.Join})
	}
	for i, mp := range sp.Modules {
		for _, p := range mp.After {
			if dag.ModuleIndex(p) < 0 {
				return nil, fmt.Errorf("module %q runs after %q, which is not a module of the session", mp.Name, p)
			}
		}
		if dag.ModuleIndex(mp.Name) != i {
			return nil, fmt.Errorf("module %q is listed twice", mp.Name)
		}
	}
	order, err := dag.TopoOrder()
	if err != nil {
		return nil, err
	}
	if bad(sp.SLOMs) || sp.SLOMs < 0 || sp.SLOMs > 1e9 {
		return nil, fmt.Errorf("slo_ms %v: must be in [0, 1e9]", sp.SLOMs)
	}
	ss := &session{sim: s, plan: sp, order: order, errs: map[string]int{}, slo: ms(sp.SLOMs), index: index}
	ss.sources = dag.Sources()
	for _, i := range ss.sources {
		ss.rate = math.Max(ss.rate, sp.Modules[i].Rate)
	}
	planRate := ss.rate
	if s.o.RatePerSec > 0 {
		ss.rate = s.o.RatePerSec
	}
	spec := arrival.Spec{Kind: s.o.Arrival, Rate: ss.rate, CV2: s.o.CV2, MMPP: s.o.MMPP, Trace: s.o.Trace, Registry: s.o.Arrivals}
	switch k, _ := arrival.Lookup(s.o.Arrivals, spec.Kind); {
	case !driven:
		spec = arrival.Spec{Kind: "poisson", Rate: ss.rate}
	case spec.Kind == "trace" && spec.Trace != nil: // the rate over the window simulated
		if _, ss.rate = spec.Trace.MeanRate(s.o.Duration); !(ss.rate > 0) {
			return nil, fmt.Errorf("trace %s: fewer than two arrivals in %v, no rate to simulate", spec.Trace.Name, s.o.Duration)
		}
	case k != nil && k.OwnRate():
		ss.rate = spec.MeanRate()
	}
	if !(ss.rate > 0) {
		return nil, errors.New("source modules have no rate: pass a rate")
	}
	if ss.rate > maxRate || ss.rate < minRate {
		return nil, fmt.Errorf("request rate %g req/s: the simulator takes %g to %g", ss.rate, minRate, float64(maxRate))
	}
	if n := ss.rate * s.o.Duration.Seconds(); n > maxRequests {
		return nil, fmt.Errorf("%g req/s for %v is %.3g requests: the simulator takes at most %g a session", ss.rate, s.o.Duration, n, float64(maxRequests))
	}
	for i := range sp.Modules {
		mp := &sp.Modules[i]
		if mp.Rate < 0 || bad(mp.Rate) {
			return nil, fmt.Errorf("module %q: rate %v: must be a finite number ≥ 0", mp.Name, mp.Rate)
		}
		// The simulated gateway is warm: it has been serving this load, so
		// FlushIdle's arrival-gap estimate starts from the simulated rate, not
		// cold as a fresh gateway's does (dispatcher.Options.ArrivalGap).
		var gap time.Duration
		if r := mp.Rate*ss.rate/planRate + mp.DummyRate; planRate > 0 && r > 0 {
			gap = time.Duration(float64(time.Second) / r)
		}
		send := &moduleSender{s: s.sender}
		if err := send.set(mp, ss.tailDraws); err != nil {
			return nil, fmt.Errorf("module %q: %w", mp.Name, err)
		}
		d, err := dispatcher.New(racingSets(*mp), dispatcher.Options{Policy: s.o.Policy, Flush: s.o.Flush, Admission: s.o.Admission, LateCommit: s.o.LateCommit,
			ArrivalGap: gap, Clock: s.clock, Sender: send, Devices: s.devTable})
		if err != nil {
			return nil, err
		}
		var spare []dispatcher.Slot
		for _, sl := range s.o.Spare {
			if sl.Module == mp.Name {
				spare = append(spare, sl)
			}
		}
		if len(spare) > 0 {
			if err := d.SetSpare(spare); err != nil {
				return nil, err
			}
		}
		m := &module{plan: mp, d: d, send: send, children: dag.Children(i), primary: -1, lane: -1, anyOf: dag.Modules[i].AnyOf(),
			budget: ms(mp.BudgetMs), wcl: ms(mp.WCLMs), errs: map[string]int{},
			groupMax: make([]time.Duration, len(mp.Configs)), groupN: make([]int, len(mp.Configs))}
		parents := dag.Parents(i)
		m.parents = len(parents)
		if len(parents) == 0 {
			m.ratio = 1
			if planRate > 0 {
				m.ratio = mp.Rate / planRate
			}
		} else {
			m.primary = parents[0]
			m.ratio = 1
			if pr := sp.Modules[parents[0]].Rate; pr > 0 && mp.Rate > 0 {
				m.ratio = mp.Rate / pr
			}
		}
		if r := mp.Rate / planRate; m.ratio > maxFanOut || bad(m.ratio) || r > maxFanOut {
			return nil, fmt.Errorf("module %q: rate %g is %g items per item of its parent (or per request): at most %d allowed", mp.Name, mp.Rate, m.ratio, maxFanOut)
		}
		if len(mp.FanOut) > 0 {
			f, ok := mp.FanOut.Normalized()
			if !ok || len(parents) != 1 {
				return nil, fmt.Errorf("module %q: fanout %v: want one parent and items from 0 to %d listed once with shares ≥ 0 summing to more than 0", mp.Name, mp.FanOut, api.MaxFanOutItems)
			}
			m.fanOut, m.cum = f, f.Cumulative()
			if ss.rng == nil {
				ss.rng = rand.New(rand.NewPCG(s.o.Seed^0x6a09e667f3bcc909, index))
			}
		}
		want := int(float64(s.o.Duration.Seconds())*ss.rate*m.ratio*1.05) + 16
		m.lat = make([]time.Duration, 0, min(want, 1<<24))
		ss.mods = append(ss.mods, m)
	}
	if err := ss.compileAnyOf(&dag); err != nil {
		return nil, err
	}
	times, err := s.moduleTimes(sp)
	if err != nil {
		return nil, err
	}
	for i, m := range ss.mods {
		m.times = times[i]
		m.stage = &dispatcher.Stage{D: m.d}
	}
	for _, m := range ss.mods {
		for _, c := range m.children {
			m.stage.Next = append(m.stage.Next, ss.mods[c].stage)
		}
	}
	ss.lat = make([]time.Duration, 0, min(int(s.o.Duration.Seconds()*ss.rate*1.05)+16, 1<<24))
	proc, err := spec.New(s.o.Seed + index*0x5851f42d4c957f2d)
	if err != nil {
		return nil, err
	}
	ss.proc = proc
	return ss, nil
}

// compileAnyOf marks the session's sinks and its anyof modules' racing
// branches (api.Session.RacingBranches, the gateway's rule): laneMods[l]
// are the modules of branch l.
func (ss *session) compileAnyOf(dag *api.Session) error {
	joins, branches, err := dag.RacingBranches()
	if err != nil {
		return err
	}
	for _, i := range dag.Sinks() {
		ss.mods[i].sink = true
		ss.sinks++
	}
	for k, i := range joins {
		m := ss.mods[i]
		for _, b := range branches[k] {
			for _, x := range b {
				ss.mods[x].lane = ss.lanes
			}
			m.raced = append(m.raced, ss.lanes)
			ss.laneMods = append(ss.laneMods, b)
			ss.lanes++
		}
	}
	return nil
}

// Limits that keep a simulation finite and its memory bounded.
const (
	maxRate     = 1e7  // req/s per session
	minRate     = 1e-3 // req/s: slower gaps overflow time.Duration in arrival
	maxRequests = 1e9  // measured requests per session
	maxFanOut   = 1000
)

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func (s *sim) run() {
	for _, ss := range s.sessions {
		ss.timer = s.clock.AfterFunc(0, ss.arrive)
	}
	for _, c := range s.o.Changes {
		s.clock.AfterFunc(c.At, func() { s.change(c.Plan) })
	}
	s.clock.Run(s.end)
	drain := s.o.Drain
	if drain <= 0 {
		drain = 10 * time.Second
		for _, ss := range s.sessions {
			drain = max(drain, 10*time.Second+10*ss.slo)
		}
	}
	limit := s.end.Add(drain)
	for s.live > 0 {
		at, ok := s.clock.NextAt()
		if !ok || at.After(limit) {
			break
		}
		s.clock.Step()
	}
	for _, ss := range s.sessions {
		for _, m := range ss.mods {
			m.d.Close()
		}
	}
}

// checkChanges checks Options.Changes against plan: in time order, unplaced,
// every planned session of plan in each change's plan with the same modules.
func checkChanges(plan *api.Plan, changes []PlanChange) error {
	if len(changes) > 0 && plan.Placed() {
		return errors.New("plan changes: the plan is placed (names backends); changes simulate unplaced plans (--place=false)")
	}
	for i, c := range changes {
		switch {
		case c.Plan == nil:
			return fmt.Errorf("plan change %d: no plan", i)
		case c.At < 0 || (i > 0 && c.At < changes[i-1].At):
			return fmt.Errorf("plan change %d at %v: times must be ≥ 0 and in order", i, c.At)
		case c.Plan.Placed():
			return fmt.Errorf("plan change %d at %v: the plan is placed (names backends); changes simulate unplaced plans", i, c.At)
		}
		for _, sp := range plan.Sessions {
			if sp.Error != "" || len(sp.Modules) == 0 {
				continue
			}
			np := changedSession(c.Plan, sp.Name)
			if np == nil {
				return fmt.Errorf("plan change %d at %v: session %q is not planned in it", i, c.At, sp.Name)
			}
			if len(np.Modules) != len(sp.Modules) {
				return fmt.Errorf("plan change %d at %v: session %q has %d modules, the plan %d", i, c.At, sp.Name, len(np.Modules), len(sp.Modules))
			}
			for j := range sp.Modules {
				if np.Modules[j].Name != sp.Modules[j].Name {
					return fmt.Errorf("plan change %d at %v: session %q module %d is %q, the plan's %q", i, c.At, sp.Name, j, np.Modules[j].Name, sp.Modules[j].Name)
				}
			}
		}
	}
	return nil
}

// changedSession returns the planned session name of p, or nil.
func changedSession(p *api.Plan, name string) *api.SessionPlan {
	for i := range p.Sessions {
		if sp := &p.Sessions[i]; sp.Name == name && sp.Error == "" {
			return sp
		}
	}
	return nil
}

// change switches every session to its plan in p (Options.Changes). The
// budgets and times admission works from follow the new plan.
func (s *sim) change(p *api.Plan) {
	for _, ss := range s.sessions {
		np := changedSession(p, ss.plan.Name)
		times, err := s.moduleTimes(np)
		if err != nil {
			if s.changeErr == nil {
				s.changeErr = fmt.Errorf("plan change at %v: session %q: %w", s.clock.Now().Sub(start), ss.plan.Name, err)
			}
			continue
		}
		for i, m := range ss.mods {
			mp := &np.Modules[i]
			if err := m.send.set(mp, ss.tailDraws); err != nil {
				if s.changeErr == nil {
					s.changeErr = fmt.Errorf("plan change at %v: session %q module %q: %w", s.clock.Now().Sub(start), ss.plan.Name, mp.Name, err)
				}
				continue
			}
			if err := m.d.SetPlan(racingSets(*mp)); err != nil {
				if s.changeErr == nil {
					s.changeErr = fmt.Errorf("plan change at %v: session %q module %q: %w", s.clock.Now().Sub(start), ss.plan.Name, mp.Name, err)
				}
				continue
			}
			m.budget, m.wcl = ms(mp.BudgetMs), ms(mp.WCLMs)
			m.times = times[i]
		}
	}
}

// moduleTimes is the item times of each module of sp (indexed as
// sp.Modules), as the live gateway sets them (dataplane's setTails) but with
// no slack: the simulator has no hop to the backend. PathBudget is set with
// Options.InvocationSlack. Errors are ShortestRest's (a cycle).
func (s *sim) moduleTimes(sp *api.SessionPlan) ([]dispatcher.ModuleTimes, error) {
	rest, err := sp.ShortestRest()
	if err != nil {
		return nil, err
	}
	var paths []time.Duration
	if s.o.InvocationSlack {
		paths, _ = sp.BudgetRest() // the same graph ShortestRest accepted
	}
	times := make([]dispatcher.ModuleTimes, len(sp.Modules))
	for i := range sp.Modules {
		mp := &sp.Modules[i]
		shortest := time.Duration(math.MaxInt64)
		for _, c := range mp.Configs {
			shortest = min(shortest, ms(c.DurationMs))
		}
		times[i] = dispatcher.ModuleTimes{Budget: ms(mp.BudgetMs), Shortest: shortest, Tail: rest[i] - shortest}
		if paths != nil {
			times[i].PathBudget = paths[i]
		}
	}
	return times, nil
}

func (ss *session) arrive() {
	s := ss.sim
	now := s.clock.Now()
	r := s.getRequest(ss)
	r.arrival = now
	r.measured = now.Before(s.end)
	if r.measured {
		ss.arrived++
		s.live++
	}
	for _, i := range ss.order {
		m := ss.mods[i]
		r.wait[i] = m.parents
		if m.anyOf {
			r.wait[i] = 1 // the first parent to finish starts it
		}
		var units float64
		if m.primary < 0 {
			units = 1
		} else {
			units = float64(r.count[m.primary])
		}
		if m.fanOut != nil {
			n := 0
			for range int(units) {
				n += m.fanOut.Draw(m.cum, ss.rng.Float64())
			}
			r.count[i] = n
			continue
		}
		if units > 0 {
			m.acc += m.ratio * units
		}
		n := int(m.acc + 1e-9)
		m.acc -= float64(n)
		r.count[i] = n
	}
	r.inflight = 1
	r.sinksLeft, r.doneAt = ss.sinks, time.Time{}
	for l := range ss.lanes {
		r.cut[l].Store(false)
	}
	for _, i := range ss.sources {
		ss.startModule(r, i)
	}
	ss.release(r)
	// Arrivals go on after the window, unmeasured, so that the measured requests
	// still in flight see the same load until they finish (a trace's end here).
	if gap := ss.proc.Next(); gap != arrival.Never {
		ss.timer.Reset(gap)
	}
}

func (ss *session) startModule(r *request, i int) {
	m := ss.mods[i]
	var cut *atomic.Bool
	if m.lane >= 0 {
		if cut = &r.cut[m.lane]; cut.Load() {
			return // its branch lost the race: nothing of it starts
		}
	}
	n := r.count[i]
	r.left[i] = n
	if n == 0 {
		ss.finishModule(r, i)
		return
	}
	s := ss.sim
	// With admission the simulator stands for the live gateway and gives
	// items its times (dataplane.LiveRunner.Run): admission's bound and the
	// expiry from the request's deadline. Without, the paper's dispatcher:
	// an item's deadline is its module budget, which the planner's
	// simulations (PlanForBursts) are calibrated on.
	live := s.o.Admission && ss.slo > 0
	var reserve time.Duration
	if live {
		reserve = m.stage.Reserve(s.clock.Now())
	}
	for k := 0; k < n && r.failed == ""; k++ {
		si := s.getItem()
		si.req, si.mod = r, i
		si.it.Abandoned = cut
		if live {
			si.it.SetDeadlines(s.clock.Now(), r.arrival.Add(ss.slo), &m.times, reserve)
		}
		r.inflight++
		if err := m.d.Submit(&si.it); err != nil {
			r.inflight--
			switch {
			case !r.measured:
			case errors.Is(err, dispatcher.ErrOverloaded):
				m.refused++
			default:
				m.errs[kind(err)]++
			}
			r.failed = kind(err)
			s.putItem(si)
		}
	}
}

func (ss *session) finishModule(r *request, i int) {
	m := ss.mods[i]
	if m.sink && ss.lanes > 0 {
		if r.sinksLeft--; r.sinksLeft == 0 {
			r.doneAt = ss.sim.clock.Now()
		}
	}
	if m.lane >= 0 && r.cut[m.lane].Load() {
		return // a losing branch: the join started without it
	}
	for _, c := range m.children {
		r.wait[c]--
		if r.wait[c] == 0 && r.failed == "" {
			if ss.mods[c].anyOf {
				ss.cut(r, c, m.lane)
			}
			ss.startModule(r, c)
		}
	}
}

// cut ends the branches racing into anyof module j other than won, for r:
// their modules not started never start, and their items still queued are
// swept (dispatcher.Dispatcher.Sweep), as the gateway cancels them; items
// already sent run on and are dropped.
func (ss *session) cut(r *request, j, won int) {
	for _, l := range ss.mods[j].raced {
		if l == won {
			continue
		}
		r.cut[l].Store(true)
		for _, x := range ss.laneMods[l] {
			ss.mods[x].d.Sweep()
		}
	}
}

func (ss *session) release(r *request) {
	r.inflight--
	if r.inflight > 0 {
		return
	}
	s := ss.sim
	if r.measured {
		switch r.failed {
		case "":
		case KindRefused:
			ss.refused++
		default:
			ss.errs[r.failed]++
		}
		good := false
		if r.failed == "" {
			lat := s.clock.Now().Sub(r.arrival)
			if !r.doneAt.IsZero() { // anyof: its sinks were done before the losers' batches
				lat = r.doneAt.Sub(r.arrival)
			}
			ss.lat = append(ss.lat, lat)
			if good = ss.slo <= 0 || lat <= ss.slo; good {
				ss.good++
			}
		}
		if s.o.PerSecond {
			sec := int(r.arrival.Sub(start) / time.Second)
			for len(ss.seconds) <= sec {
				ss.seconds = append(ss.seconds, SecondCount{})
			}
			ss.seconds[sec].Arrived++
			if good {
				ss.seconds[sec].Within++
			}
		}
		s.live--
	}
	s.putRequest(r)
}

func (s *sim) onItemDone(it *dispatcher.Item) {
	si := it.Tag.(*simItem)
	r, i := si.req, si.mod
	ss := r.s
	m := ss.mods[i]
	if m.lane >= 0 && r.cut[m.lane].Load() {
		// A losing branch's item, swept or run for nothing: neither an
		// error of the request nor a latency of the module.
		s.putItem(si)
		r.left[i]--
		ss.release(r)
		return
	}
	if it.Err != nil {
		k := kind(it.Err)
		if r.measured {
			m.errs[k]++
		}
		r.failed = k
	} else if r.measured {
		lat := it.Finished.Sub(it.Arrival)
		m.lat = append(m.lat, lat)
		if m.budget <= 0 || lat <= m.budget {
			m.good++
		}
		if m.wcl > 0 && lat > m.wcl+time.Microsecond {
			m.overWCL++
		}
		if g := it.Slot.Group; g >= 0 { // -1: a spare machine
			m.groupMax[g] = max(m.groupMax[g], lat)
			m.groupN[g]++
		}
	}
	s.putItem(si)
	r.left[i]--
	if r.left[i] == 0 && r.failed == "" {
		r.inflight++ // hold the request while its children start
		ss.finishModule(r, i)
		r.inflight--
	}
	ss.release(r)
}

func kind(err error) string {
	switch {
	case errors.Is(err, dispatcher.ErrDeadline):
		return KindDeadline
	case errors.Is(err, dispatcher.ErrClosed):
		return KindClosed
	case errors.Is(err, dispatcher.ErrOverloaded):
		return KindRefused
	}
	return KindSender
}

func (s *sim) getItem() *simItem {
	if n := len(s.itemFree); n > 0 {
		si := s.itemFree[n-1]
		s.itemFree = s.itemFree[:n-1]
		return si
	}
	si := &simItem{}
	si.it.Tag = si
	si.it.Done = s.itemDone
	return si
}

func (s *sim) putItem(si *simItem) {
	si.req, si.it.Abandoned = nil, nil
	si.it.Arrival, si.it.Deadline, si.it.Expiry, si.it.DoneBy = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	s.itemFree = append(s.itemFree, si)
}

func (s *sim) getRequest(ss *session) *request {
	if n := len(s.reqFree); n > 0 {
		r := s.reqFree[n-1]
		s.reqFree = s.reqFree[:n-1]
		if len(r.count) >= len(ss.mods) && len(r.cut) >= ss.lanes {
			r.s, r.failed = ss, ""
			return r
		}
	}
	n := len(ss.mods)
	return &request{s: ss, count: make([]int, n), left: make([]int, n), wait: make([]int, n), cut: make([]atomic.Bool, ss.lanes)}
}

func (s *sim) putRequest(r *request) {
	r.s = nil
	s.reqFree = append(s.reqFree, r)
}

// sender runs batches on virtual backends: each batch is done after its slot's
// profiled duration (× jitter), or what its module's moduleSender drew. In a
// placed plan (slots with a Backend) the
// slots on one backend share that device's lanes (simDevice); a batch finding
// them all busy waits for one. Completion records and their timers are reused.
type sender struct {
	clock  *dispatcher.VirtualClock
	jitter float64
	rng    *rand.Rand
	free   []*completion
	devs   map[string]*simDevice // nil: every slot is a device of its own
}

var _ dispatcher.Sender = (*sender)(nil)

type completion struct {
	s    *sender
	b    *dispatcher.Batch
	dev  *simDevice
	sent time.Time
	ran  time.Duration
	t    dispatcher.Timer
	fn   func()
}

func (s *sender) Send(b *dispatcher.Batch) { s.send(b, s.duration(b.Slot.Duration)) }

// duration returns how long a batch of profiled duration d runs: d × (1 ±
// jitter), uniformly.
func (s *sender) duration(d time.Duration) time.Duration {
	if s.jitter > 0 {
		d = time.Duration(float64(d) * (1 + s.jitter*(2*s.rng.Float64()-1)))
	}
	return d
}

// send runs b for ran.
func (s *sender) send(b *dispatcher.Batch, ran time.Duration) {
	var c *completion
	if n := len(s.free); n > 0 {
		c = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		c = &completion{s: s}
		c.fn = c.fire
	}
	c.b = b
	c.ran = ran
	c.dev = nil
	if s.devs != nil && b.Slot.Backend != "" {
		c.dev = s.devs[b.Slot.Backend]
	}
	if d := c.dev; d != nil {
		d.batches++
		if d.busy >= d.lanes {
			d.queued++
			c.sent = s.clock.Now()
			d.queue = append(d.queue, c)
			return
		}
		d.busy++
	}
	c.start()
}

func (c *completion) start() {
	if c.dev != nil {
		c.dev.busyFor += c.ran
	}
	if c.t == nil {
		c.t = c.s.clock.AfterFunc(c.ran, c.fn)
	} else {
		c.t.Reset(c.ran)
	}
}

func (c *completion) fire() {
	b := c.b
	c.b = nil
	if d := c.dev; d != nil {
		if d.head < len(d.queue) {
			next := d.queue[d.head]
			d.queue[d.head] = nil
			d.head++
			if d.head == len(d.queue) {
				d.queue, d.head = d.queue[:0], 0
			}
			d.maxWait = max(d.maxWait, c.s.clock.Now().Sub(next.sent))
			next.start()
		} else {
			d.busy--
		}
		c.dev = nil
	}
	c.s.free = append(c.s.free, c)
	b.Done(nil, nil)
}
