package dispatcher

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Sender runs batches: the live gateway's backend client, or the simulator's
// virtual backends. Send is called from whichever goroutine made the batch ready
// (a Submit caller, a timer, a Done caller), never with the dispatcher's lock held;
// it must not block for long (hand the batch to a connection's goroutine). It must
// call b.Done exactly once, from any goroutine, and then forget b.
type Sender interface {
	Send(b *Batch)
}

// Options configure a Dispatcher. Sender is required.
type Options struct {
	// Policy routes arrivals to open batches; nil means TC.
	Policy Policy
	// Flush is the flush rule: nil means FlushDeadline (the paper's); also
	// FlushIdle, or any rule of a registry main builds (flush.go).
	Flush Flush
	// ArrivalGap seeds FlushIdle's arrival-gap estimate (a dispatcher's
	// ArrivalGap when this one replaces it); 0: the plan's rate.
	ArrivalGap time.Duration
	// Admission makes Submit refuse, at once and with ErrOverloaded, an item
	// that would complete after it is due (Item.Due) given the machines'
	// queues now (Predict; docs/dataplane.md, "Admission"). Off, an item
	// that cannot be served in time is failed with ErrDeadline when its
	// batch is sent, the paper's rule.
	Admission bool
	// HandoffMargin is, with Admission, the margin admission keeps before an
	// item's Due for each batch queued ahead of its own on the machine it
	// would go to (a wait of k batch durations keeps k × HandoffMargin); 0:
	// none, an item is admitted when its batch is predicted to end by its
	// Due. Each batch ahead is a lane freeing and the next batch sent, a
	// wake-up of the gateway and of the backend that a loaded host delays;
	// under overload admission fills the queue to the deadline, and one
	// stall then makes a whole batch late. With FlushIdle and a planned
	// rate, the margin is at least a third of the module's budget (two
	// thirds over a surge's first 300 ms) while
	// the items offered outrun 1.5× that rate (a surge; predict.go, marginFor). The
	// live gateway sets it at the modules a request enters by
	// (dataplane.HandoffMargin); the simulator's virtual clock has no host
	// to stall.
	HandoffMargin time.Duration
	// Clock defaults to SystemClock.
	Clock Clock
	// Sender runs the batches.
	Sender Sender
	// Health, when set, gives each backend's MachineHealth: down machines are
	// skipped and slow ones down-weighted (health.go).
	Health HealthTable
	// Profiled, when set, gives the offline profile's duration of a
	// machine's config (its hardware, batch size and concurrency; 0:
	// unknown), read once per machine when a plan's table is built: a
	// backend's pace (MachineHealth.SetPace) is measured against it, so a
	// plan made from calibrated profiles, whose durations already hold the
	// pace, does not count it twice. Nil or 0: the planned duration.
	Profiled func(hardware string, batch, concurrency int) time.Duration
	// Devices, when set, gives each backend's Device: the batches every
	// dispatcher using the backend has sent there, which a batch sent now
	// waits behind (device.go). Nil: only this dispatcher's own batches.
	Devices DeviceTable
	// Locality sends a batch whose items name a Home (Item.Home) to a
	// machine of its group on that backend when one is free now and runs as
	// planned, before the one machine choice (the batch ends there as soon
	// as anywhere: nothing admission predicted changes); else the choice as
	// without it. Cloudflow's dynamic dispatch with caching (docs/locality.md).
	Locality bool
	// LateCommit (Llama's late commit, per batch; off by default: the
	// gateway's and `piccolo simulate`'s --late-commit): a batch that would
	// end after its earliest item is due on the machine its group chose goes
	// instead to an idle machine of another of the module's planned groups
	// that ends it in time, the cheapest machine time (price × duration)
	// first, without delaying a batch open for that machine's group past
	// its latest send (lateCommitFor; docs/dataplane.md, "Late commit");
	// admission counts those machines too. Spare machines (SetSpare) come
	// after them.
	LateCommit bool
	// ClassFloor is, with Admission, the share of the admitted items (about
	// the last 500) below which a priority class is admitted as class 0, so
	// that no class starves; 0: DefaultClassFloor; negative: no floor.
	ClassFloor float64
}

// Closer is what closed a batch for dispatch; it indexes Stats.Closed.
type Closer int

const (
	ClosedFull     Closer = iota // the batch reached its group's batch size
	ClosedDeadline               // the deadline flush: its oldest item could wait no longer
	ClosedIdle                   // FlushIdle: a machine of its group was idle
	numClosers
)

// String returns the Closer's metric label: full, deadline or idle.
func (c Closer) String() string {
	switch c {
	case ClosedFull:
		return "full"
	case ClosedDeadline:
		return "deadline"
	case ClosedIdle:
		return "idle"
	}
	return fmt.Sprintf("Closer(%d)", int(c))
}

// Stats are a module dispatcher's counters since New. Items are real requests;
// dummies are counted apart and are never items.
type Stats struct {
	Submitted        uint64 // items accepted by Submit
	Completed        uint64 // items completed through a sent batch (with or without error)
	Failed           uint64 // of Completed, items whose batch the Sender failed
	DeadlineOnSubmit uint64 // items Submit refused with ErrDeadline (past their expiry)
	DeadlineOnSend   uint64 // items failed with ErrDeadline when their batch was sent (past their expiry)
	Overloaded       uint64 // items Submit refused with ErrOverloaded (Options.Admission: predicted late)
	// Cancelled counts the items abandoned (Item.Abandoned) before they were
	// sent, taken out by Sweep or at send and completed with ErrCancelled;
	// Dropped the items of sent batches abandoned by the time the batch
	// finished (they ran; their callers drop the results; counted in
	// Completed too).
	Cancelled, Dropped uint64
	// ByClass are the items by priority class (Item.Class): accepted by
	// Submit and refused with ErrOverloaded.
	ByClass         [Classes]ClassStats
	DummiesInjected uint64 // dummy arrivals at the planned dummy rate
	DummiesDropped  uint64 // dummies of batches that held no real item (never sent)
	// Overflow counts the batches sent to a spare machine (SetSpare) because
	// every machine of their group was busy and they would have completed
	// too late there.
	Overflow uint64
	// LateCommitted counts the batches Options.LateCommit sent to a machine
	// of another of the module's groups because their own would have ended
	// them too late.
	LateCommitted uint64
	// Local counts the batches Options.Locality sent to a free machine on
	// the backend holding their items (Item.Home).
	Local uint64
	// HandedOver counts the items Handover moved from this dispatcher to
	// another, unsent (counted in this one's Submitted); TakenOver those it
	// took from another (counted in this one's Completed, not Submitted).
	HandedOver, TakenOver uint64
	// Closed counts the batches with a real item closed for dispatch, by the
	// Closer that closed them (a small mean batch size with many ClosedIdle
	// is FlushIdle at low load; with many ClosedDeadline, a rate below plan).
	Closed [numClosers]uint64
	// Slots are the current plan's machines, in rank order.
	Slots []SlotStats
	// Spare are the spare machines' (SetSpare), in the order given.
	Spare []SlotStats
}

// ClassStats are one priority class's counts.
type ClassStats struct{ Submitted, Overloaded uint64 }

// SlotStats are the counters of one machine under the current plan.
type SlotStats struct {
	Slot    Slot
	Batches uint64        // batches sent
	Items   uint64        // real items sent
	Dummies uint64        // dummies sent
	Busy    time.Duration // lane-time of finished batches (sent → done)
}

// Dispatcher batches and dispatches one module's items to the machines of its plan
// (§III-B). Submit, SetPlan, Stats and Close are safe for concurrent use; one mutex
// per module guards the queues and is never held while calling the Sender or an
// item's Done.
type Dispatcher struct {
	module string
	policy Policy
	local  bool  // Options.Locality
	late   bool  // Options.LateCommit
	frule  Flush // Options.Flush
	early  bool  // flush.Early(), read once
	admit  bool  // Options.Admission
	// handoff is Options.HandoffMargin.
	handoff time.Duration
	clock   Clock
	sender  Sender
	health  HealthTable // nil: every machine up, none slow
	// profiled is Options.Profiled.
	profiled func(hardware string, batch, concurrency int) time.Duration
	devs     DeviceTable // nil: a machine's lanes are its own

	mu     sync.Mutex
	st     *state
	spare  []*machine // SetSpare's machines: overflow, outside the plan
	closed bool
	free   *Batch // recycled batches (linked by link)
	stats  Stats

	// FlushIdle's arrival-gap estimate (items and dummies), exponentially
	// weighted: the time the open batch needs to fill.
	lastArrival time.Time
	gap         float64 // seconds
	// surgeEst is the gap (ns) between items offered to admission,
	// refused ones included (weight 1/surgeSpan; lastOffered the latest,
	// unix ns): whether the module is in a surge (predict.go, marginFor).
	// Slower than gap, so a Poisson clump at the planned rate is not one.
	surgeEst    int64
	lastOffered int64
	// surgeSince is when the current surge was first seen (unix ns; 0: no
	// surge): its onset keeps the larger margin (predict.go, marginFor).
	surgeSince int64
	// Work conservation on a fresh dispatcher: the arrivals counted since
	// born, up to warmArrivals (a dispatcher given a measured ArrivalGap
	// starts warm).
	born    time.Time
	arrived int
	// The last recentArrivals arrival times, a ring: a burst's rate.
	recent  [recentArrivals]time.Time
	recentI int

	dummyEvery time.Duration
	dummyNext  time.Time
	dummyTimer Timer
	// relaxTimer runs relaxStale while a group's slowness is above 1
	// (relaxArmed: it is armed); made at the first rise.
	relaxTimer Timer
	relaxArmed bool

	// Lag's snapshot, published under mu at each batch event (predict.go).
	lagFree, lagDur atomic.Int64

	// Priority classes (cancel.go): each class's share of the items
	// admitted lately, and the floor below which it is admitted as class 0.
	classOffered, classAdmitted [Classes]float64
	classFloor                  float64
	// classesSeen has bit c set once an item of class c was queued: with
	// one class only, promoteLocked has nothing to do.
	classesSeen uint8
	// classesOffered has bit c set once an item of class c was offered to
	// admission: while one class only has been, the shares are not kept
	// (sharesLocked seeds them when a second class arrives).
	classesOffered uint8
}

// state is one plan's dispatch table; SetPlan replaces it whole.
type state struct {
	budget   time.Duration
	groups   []*group
	machines []*machine
	router   Router
	peeker   Peeker   // router, when it is one; nil otherwise
	queues   []*queue // the router's streams, by index
	shared   []*queue // the streams of no fixed machine
	sumGroup float64
	sumMach  float64
	maxBatch int
	// FlushIdle (TC): the most machine-seconds any group spends per batch of
	// the module (max share·duration/occupancy).
	maxLoad     float64
	maxDuration time.Duration // of the groups' batches
	// surgeGap is the gap (ns) between offered items below which the module
	// is offered more than surgeFactor × its planned rate (0: no planned rate):
	// admission keeps a surge margin then (predict.go, marginFor).
	surgeGap int64
}

type group struct {
	share     float64 // the group's share of the module's batches (weight / Σ weight), in (0, 1]
	occupancy float64 // machines: the sum of the slots' occupancies
	batch     int
	duration  time.Duration
	weight    float64 // planned batches/s: rate / batch
	machines  []*machine
	next      int // rotation: where choose starts, past the machine g's last batch went to
	// oneDev is the device every machine of g is placed on (a pool shorter
	// than the plan stacks them there), nil otherwise: choose stops at it.
	oneDev *Device
	// slow measures the group's batches against what the dispatcher
	// expected when it sent them (the wait on the device, then the
	// duration: profile × straggler slowness): a high percentile of
	// measured/expected, 1 until a batch finishes. Predict scales by it
	// (predict.go).
	slow float64
	// seen is when slow last moved: a batch of the group ended, a dispatcher
	// handed its slowness over, or admission relaxed it (group.relax).
	seen time.Time
}

type machine struct {
	slot    Slot
	g       *group
	busy    int // lanes in use
	pending batchFIFO
	est     []time.Time // estimated free time per lane
	running []*Batch    // the batches running on it (at most Concurrency)
	stats   SlotStats
	q       *queue         // the stream of this machine alone, if the router made one
	weight  float64        // planned req/s
	health  *MachineHealth // nil: always up, never slow
	// paceScale is the offline profile's duration over the planned one
	// (Options.Profiled; 1 when unknown): the backend's pace, measured
	// against the profile, times paceScale is m's (machine.paceRatio).
	paceScale float64
	dev       *Device // nil: no other dispatcher sends to its backend
	// peers are the machines of the same plan on the same device (a pool
	// shorter than the plan), m among them; nil when m is alone there. A
	// peer with a free lane takes their queued batches (next), so the
	// backend runs them in the order counted. Shared by the peers; set once
	// a plan.
	peers []*machine
	// lanes, with peers: the device's lanes as the peers share them. The
	// peers together send at most as many batches as the device has lanes:
	// batches sent at once from several goroutines reach the backend in any
	// order, and a batch counted to start first could run last.
	lanes *sharedLanes
}

// sharedLanes counts the batches the peers on one device are running.
type sharedLanes struct{ busy, n int }

// hasLane reports whether m can send a batch now: a lane of its own free
// and, with peers, a lane of the device.
func (m *machine) hasLane() bool {
	return m.busy < m.slot.Concurrency && (m.lanes == nil || m.lanes.busy < m.lanes.n)
}

// next returns the machine whose queued batch runs next when a lane of m
// frees: m, or with peers, whichever of m and its peers has at its head the
// batch counted on the device first (the backend runs them in that order);
// nil when none has a queued batch.
func (m *machine) next() *machine {
	if m.peers == nil {
		if m.pending.len() == 0 {
			return nil
		}
		return m
	}
	var first *machine
	for _, p := range m.peers {
		// By the order counted, not the end expected then: a batch taken
		// back (a plan swap's handover, a reroute) moves the later ones up,
		// and a batch counted after that expects an earlier end than one
		// counted before it, though the backend runs it later.
		if p.pending.len() > 0 && (first == nil || p.pending.peek().dev.seq < first.pending.peek().dev.seq) {
			first = p
		}
	}
	return first
}

// runOn returns the machine that sends b, the batch at the head of p's
// queue, now that a lane of m freed: p itself when it has a lane (b waited
// for the device, not for p, and runs as counted, for p's duration), else m
// when it has a lane and b fits its batch size; nil when neither can, and b
// waits for the next lane that frees.
func runOn(b *Batch, m, p *machine) *machine {
	switch {
	case p.hasLane():
		return p
	case m.hasLane() && b.Size() <= m.slot.Batch:
		return m
	}
	return nil
}

// attach gives m its backend's health and device, when the dispatcher has
// tables for them and the slot names a backend.
func (d *Dispatcher) attach(m *machine) {
	if m.slot.Backend == "" {
		return
	}
	if d.health != nil {
		m.health = d.health.Machine(m.slot.Backend)
		m.paceScale = 1
		if d.profiled != nil && m.slot.Duration > 0 {
			if p := d.profiled(m.slot.Hardware, m.slot.Batch, m.slot.Concurrency); p > 0 {
				m.paceScale = float64(p) / float64(m.slot.Duration)
			}
		}
	}
	if d.devs != nil {
		m.dev = d.devs.Device(m.slot.Backend)
		m.dev.ensure(m.slot.Concurrency)
	}
}

func newMachine(s Slot, g *group) *machine {
	m := &machine{slot: s, g: g, est: make([]time.Time, s.Concurrency), running: make([]*Batch, 0, s.Concurrency)}
	m.stats.Slot = s
	return m
}

// queue is one stream of the router: an open batch and its deadline flush timer.
type queue struct {
	d       *Dispatcher
	stream  int      // index in state.queues
	m       *machine // the machine every batch goes to; nil: the group's, in rotation
	open    *Batch
	armed   bool
	flushAt time.Time
	wakeAt  time.Time // when timer fires: flushAt, or a recheck before it
	wakeFor int       // the open batch's size when a recheck was computed
	timer   Timer
}

type outList struct{ head, tail *Batch }

func (o *outList) push(b *Batch) {
	b.link = nil
	if o.tail == nil {
		o.head = b
	} else {
		o.tail.link = b
	}
	o.tail = b
}

// New returns the dispatcher of module mp. Errors wrap ErrPlan and name the bad field.
func New(mp api.ModulePlan, opts Options) (*Dispatcher, error) {
	if opts.Sender == nil {
		return nil, fmt.Errorf("module %q: dispatcher needs a Sender", mp.Name)
	}
	if opts.Policy == nil {
		opts.Policy = TC{}
	}
	if opts.Flush == nil {
		opts.Flush = FlushDeadline
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	d := &Dispatcher{module: mp.Name, policy: opts.Policy, frule: opts.Flush, early: opts.Flush.Early(), admit: opts.Admission, handoff: opts.HandoffMargin, local: opts.Locality, late: opts.LateCommit, clock: opts.Clock, sender: opts.Sender,
		health: opts.Health, devs: opts.Devices, profiled: opts.Profiled, gap: opts.ArrivalGap.Seconds(), born: opts.Clock.Now()}
	if !opts.Admission {
		d.handoff = 0 // the margin is admission's: without it the machine choice keeps none either
	}
	if opts.ArrivalGap > 0 {
		d.arrived = warmArrivals
	}
	switch d.classFloor = opts.ClassFloor; {
	case d.classFloor == 0:
		d.classFloor = DefaultClassFloor
	case d.classFloor < 0:
		d.classFloor = 0
	}
	for c := range d.classAdmitted { // every class starts at its floor, none below
		d.classAdmitted[c] = d.classFloor
	}
	if err := d.SetPlan(mp); err != nil {
		return nil, err
	}
	return d, nil
}

// ArrivalGap returns FlushIdle's current estimate of the mean gap between
// arrivals (items and dummies), the warm-up's measure included; 0 without one
// (FlushDeadline, or no planned rate and fewer than two arrivals). A
// dispatcher that replaces this one starts from it (Options.ArrivalGap).
func (d *Dispatcher) ArrivalGap() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.early {
		return 0
	}
	return time.Duration(d.baseGap(d.clock.Now()) * float64(time.Second))
}

// Module returns the module's name.
func (d *Dispatcher) Module() string { return d.module }

// Policy returns the dispatch policy.
func (d *Dispatcher) Policy() Policy { return d.policy }

// Budget returns the module's latency budget under the current plan (0: none).
func (d *Dispatcher) Budget() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st.budget
}

func (d *Dispatcher) newState(mp api.ModulePlan) (*state, error) {
	if mp.Name != d.module {
		return nil, fmt.Errorf("plan of module %q given to the dispatcher of module %q: %w", mp.Name, d.module, ErrPlan)
	}
	slots, err := SlotsOf(mp)
	if err != nil {
		return nil, err
	}
	var surgeGap int64
	if mp.Rate > 0 { // the requests' rate: dummies are never offered to admission
		surgeGap = int64(float64(time.Second) / (surgeFactor * mp.Rate))
	}
	st := &state{budget: time.Duration(mp.BudgetMs * float64(time.Millisecond)), surgeGap: surgeGap}
	for _, s := range slots {
		if len(st.groups) <= s.Group {
			gp := mp.Configs[s.Group]
			w := gp.Rate / float64(gp.Batch)
			if w <= 0 { // no planned rate: share by capacity
				w = gp.Machines * float64(s.Concurrency) / s.Duration.Seconds()
			}
			st.groups = append(st.groups, &group{batch: s.Batch, duration: s.Duration, weight: w, slow: 1})
			st.sumGroup += w
			st.maxBatch = max(st.maxBatch, s.Batch)
		}
		g := st.groups[s.Group]
		g.occupancy += s.Occupancy
		m := newMachine(s, g)
		m.weight = s.RatePerSec
		d.attach(m)
		if m.weight <= 0 {
			m.weight = s.Occupancy * float64(s.Concurrency*s.Batch) / s.Duration.Seconds()
		}
		st.sumMach += m.weight
		g.machines = append(g.machines, m)
		st.machines = append(st.machines, m)
	}
	onDev := map[*Device][]*machine{} // once a plan, not per request
	for _, m := range st.machines {
		if m.dev != nil {
			onDev[m.dev] = append(onDev[m.dev], m)
		}
	}
	for _, ms := range onDev {
		if len(ms) > 1 {
			lanes := &sharedLanes{}
			for _, m := range ms {
				lanes.n = max(lanes.n, m.slot.Concurrency)
			}
			for _, m := range ms {
				m.peers, m.lanes = ms, lanes // one slice a device, m among them
			}
		}
	}
	for _, g := range st.groups {
		g.oneDev = g.machines[0].dev
		for _, m := range g.machines {
			if m.dev != g.oneDev {
				g.oneDev = nil
			}
		}
		g.share = g.weight / st.sumGroup
		st.maxLoad = max(st.maxLoad, g.share*g.duration.Seconds()/g.occupancy)
		st.maxDuration = max(st.maxDuration, g.duration)
	}
	if err := d.route(st); err != nil {
		return nil, fmt.Errorf("module %q: dispatch policy %q: %w", d.module, d.policy.Name(), err)
	}
	return st, nil
}

// route asks the policy for st's router and makes its streams.
func (d *Dispatcher) route(st *state) error {
	t := &Table{Groups: make([]TableGroup, len(st.groups)), Machines: make([]TableMachine, len(st.machines))}
	for i, g := range st.groups {
		t.Groups[i] = TableGroup{Batch: g.batch, BatchRate: g.weight}
	}
	for i, m := range st.machines {
		t.Machines[i] = TableMachine{Group: m.slot.Group, Rate: m.weight}
	}
	st.router = d.policy.NewRouter(t)
	st.peeker, _ = st.router.(Peeker)
	streams := st.router.Streams()
	if len(streams) == 0 {
		return errors.New("the router has no stream")
	}
	for s, mi := range streams {
		q := &queue{d: d, stream: s}
		switch {
		case mi == -1:
			st.shared = append(st.shared, q)
		case mi < 0 || mi >= len(st.machines):
			return fmt.Errorf("stream %d: machine %d: the plan has machines 0 to %d", s, mi, len(st.machines)-1)
		case st.machines[mi].q != nil:
			return fmt.Errorf("stream %d: machine %d already has a stream", s, mi)
		default:
			q.m = st.machines[mi]
			q.m.q = q
		}
		st.queues = append(st.queues, q)
	}
	return nil
}

// SetPlan swaps in a new plan for the module, atomically with respect to Submit.
// Items waiting in open batches or in machine queues move to the new slots in
// arrival order; batches already sent finish on their old slots. Nothing is lost.
// On error the old plan stays.
func (d *Dispatcher) SetPlan(mp api.ModulePlan) error {
	st, err := d.newState(mp)
	if err != nil {
		return err
	}
	var out outList
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	var moved []*Item
	if d.st != nil {
		moved = d.drainLocked()
	}
	d.st = st
	if r := mp.Rate + mp.DummyRate; r > 0 && d.gap == 0 {
		d.gap = 1 / r // the planned rate until arrivals say otherwise
	}
	if mp.Rate > 0 && d.surgeEst == 0 {
		d.surgeEst = int64(float64(time.Second) / mp.Rate)
	}
	now := d.clock.Now()
	d.publishLocked(now)
	d.resubmitLocked(moved, now, &out)
	every := time.Duration(0)
	if mp.DummyRate > 0 {
		every = time.Duration(float64(time.Second) / mp.DummyRate)
		every = max(every, time.Microsecond)
	}
	if every != d.dummyEvery {
		d.dummyEvery = every
		if every == 0 {
			if d.dummyTimer != nil {
				d.dummyTimer.Stop()
			}
		} else {
			d.dummyNext = now.Add(every)
			if d.dummyTimer == nil {
				d.dummyTimer = d.clock.AfterFunc(every, d.injectDummy)
			} else {
				d.dummyTimer.Reset(every)
			}
		}
	}
	d.mu.Unlock()
	d.flush(&out)
	return nil
}

// resubmitLocked adds items moved from another plan's queues (drainLocked,
// here or in another dispatcher: Handover) to the current plan's open
// batches, in arrival order. They were admitted once and are not again: no
// admission, no arrival counted.
func (d *Dispatcher) resubmitLocked(items []*Item, now time.Time, out *outList) {
	sort.SliceStable(items, func(i, j int) bool { return items[i].Arrival.Before(items[j].Arrival) })
	for _, it := range items {
		d.addLocked(it, now, out)
	}
}

// drainLocked empties the current state's open batches and machine queues and
// returns their real items; their dummies are discarded.
func (d *Dispatcher) drainLocked() []*Item {
	var items []*Item
	take := func(q *queue) {
		if q == nil {
			return
		}
		if q.armed {
			q.armed = false
			q.timer.Stop()
		}
		if b := q.open; b != nil {
			q.open = nil
			items = append(items, b.Items...)
			d.recycleLocked(b)
		}
	}
	for _, q := range d.st.queues {
		take(q)
	}
	items = d.drainQueuesLocked(d.st.machines, items)
	return d.drainQueuesLocked(d.spare, items)
}

// drainQueuesLocked empties the queues of ms onto items, in queue order.
func (d *Dispatcher) drainQueuesLocked(ms []*machine, items []*Item) []*Item {
	for _, m := range ms {
		for m.pending.len() > 0 {
			b := m.pending.pop()
			items = append(items, b.Items...)
			d.recycleLocked(b)
		}
	}
	return items
}

// Submit queues it for dispatch. It returns ErrDeadline, without keeping the
// item, when the item's expiry (by default its deadline) has already passed;
// with Options.Admission, ErrOverloaded, without keeping the item, when the
// item would complete after it is due (Item.Due, Predict); ErrClosed after
// Close, and an error when it has no Done callback; otherwise the item comes
// back through it.Done.
// Submit never blocks on a backend; it allocates nothing.
func (d *Dispatcher) Submit(it *Item) error {
	if it.Done == nil {
		return fmt.Errorf("module %q: item has no Done callback", d.module)
	}
	now := d.clock.Now()
	if it.Arrival.IsZero() {
		it.Arrival = now
	}
	it.Err, it.Outputs, it.Slot, it.Sent, it.Finished = nil, nil, nil, time.Time{}, time.Time{}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	if it.Deadline.IsZero() && d.st.budget > 0 {
		it.Deadline = it.Arrival.Add(d.st.budget)
	}
	if it.expired(now) {
		d.stats.DeadlineOnSubmit++
		d.mu.Unlock()
		return ErrDeadline
	}
	q := d.queueFor()
	if d.admit {
		b := q.open
		if b == nil {
			b = d.openLocked(q) // left open, empty, if the item is refused: the next arrival joins it
		}
		if d.early && d.handoff > 0 { // the surge margin is the handoff margin's (marginFor)
			d.offeredGapLocked(now)
		}
		c := classOf(it.Class)
		shares := d.sharesLocked(c)
		if shares {
			d.offeredLocked(c)
		}
		if !d.admitsLocked(q, b, it, now) {
			d.stats.Overloaded++
			d.stats.ByClass[c].Overloaded++
			d.mu.Unlock()
			return ErrOverloaded
		}
		if shares {
			d.admittedLocked(c)
		}
	}
	d.stats.Submitted++
	d.stats.ByClass[classOf(it.Class)].Submitted++
	if d.early {
		d.arrivedLocked(now) // here, not in addLocked: items a plan swap moves are no arrivals
	}
	var out outList
	d.addToLocked(q, it, now, &out)
	d.mu.Unlock()
	if out.head != nil {
		d.flush(&out)
	}
	return nil
}

// queueFor returns the stream the next arrival joins.
func (d *Dispatcher) queueFor() *queue { return d.st.queues[d.st.router.Join()] }

func (d *Dispatcher) openLocked(q *queue) *Batch {
	b := d.free
	if b != nil {
		d.free = b.link
		b.link = nil
	} else {
		b = &Batch{d: d, Items: make([]*Item, 0, min(d.st.maxBatch, 1024))}
	}
	if q.m != nil {
		b.g = q.m.g
	} else {
		b.g = d.st.groups[d.st.router.Open(q.stream)]
	}
	b.target = b.g.batch
	q.open = b
	return b
}

// choose is the group's step of the one machine choice (Dispatcher.target):
// the machine of g a batch closed now goes to, by when it would end there,
// and when it would start there: its expected start (startAt: a lane of its
// own and of its backend's device free) plus its expected duration (the
// planned one times its pace or straggler slowness, machine.duration).
// Scanning in rotation from g.next:
//
//   - a free machine (nothing queued, a lane of its own and of its device
//     free) that runs the batch as planned is taken at once: nothing ends a
//     batch sooner (O(1) while the machine next in rotation is free);
//   - else the free machine that ends it first, unless it would end after
//     dl, the batch's oldest deadline (zero: none), while a busy machine
//     ends it sooner: then that one (a batch the deadline flush timed does
//     not go to a free machine slowed by its pace when another ends it in
//     time, or less late);
//   - with none free, the machine that ends it first.
//
// A free machine is preferred over a busy one that would end sooner when
// both meet dl: the group's machines all work. A machine whose own lane is
// free but whose device runs another module's batches is not free: the
// batch would wait there while another machine of the group idles. The
// dispatcher's lock must be held; O(machines of g) at most, one atomic load
// a device: once a machine waits for its device rather than its own lanes,
// the group's other machines there (a pool shorter than the plan stacks
// them on one device) start no earlier, are as fast (one backend, one
// pace), and are skipped.
func (g *group) choose(now, dl time.Time) (*machine, time.Time) {
	// Ends are kept as durations from now: a machine free now costs no time
	// arithmetic, and the deadline is subtracted once, when it matters
	// (BenchmarkSubmit's admission cases choose once a request).
	n, from := len(g.machines), g.next
	if m := g.machines[from]; m.pending.len() == 0 && m.hasLane() && (m.dev == nil || m.dev.free.Load() <= now.UnixNano()) &&
		(m.health == nil || m.duration() <= m.slot.Duration) {
		return m, now // the loop's first pass, without the loop
	}
	var best, free *machine
	var bestEnd, bestWait, freeEnd time.Duration
	var bound *Device // a device whose free time bounds its machines' start
	for k := 0; k < n; k++ {
		i := from + k
		if i >= n {
			i -= n
		}
		m := g.machines[i]
		if m.dev != nil && m.dev == bound {
			if bound == g.oneDev {
				break // every machine of g is there
			}
			continue
		}
		at := m.freeAt()
		if m.dev != nil {
			if df := m.dev.freeAt(); df.After(at) {
				at = df
				if df.After(now) {
					bound = m.dev
				}
			}
		}
		du := m.duration()
		var wait time.Duration
		if at.After(now) {
			wait = at.Sub(now)
		} else if m.pending.len() == 0 {
			if du <= m.slot.Duration {
				return m, now // free and as planned: none ends it sooner
			}
			if free == nil || du < freeEnd {
				free, freeEnd = m, du
			}
		}
		if end := wait + du; best == nil || end < bestEnd {
			best, bestEnd, bestWait = m, end, wait
		}
	}
	if free != nil && (dl.IsZero() || freeEnd <= dl.Sub(now) || bestEnd >= freeEnd) {
		return free, now
	}
	return best, now.Add(bestWait)
}

// freeOn returns a machine of g on backend that is free now (nothing queued,
// a lane of its own and of its device free, not down) and runs as planned;
// nil when none is, or backend is "". O(machines of g).
func (g *group) freeOn(backend string, now time.Time) *machine {
	if backend == "" {
		return nil
	}
	for _, m := range g.machines {
		if m.slot.Backend == backend && m.pending.len() == 0 && m.hasLane() &&
			(m.dev == nil || m.dev.free.Load() <= now.UnixNano()) &&
			(m.health == nil || !m.isDown() && m.duration() <= m.slot.Duration) {
			return m
		}
	}
	return nil
}

// home returns the Home most of b's items name ("" when none names one);
// among the first four homes seen, ties to the first.
func (b *Batch) home() string {
	var homes [4]string
	var counts [4]int
	n := 0
	for _, it := range b.Items {
		if it.Home == "" {
			continue
		}
		k := 0
		for k < n && homes[k] != it.Home {
			k++
		}
		if k == n {
			if n == len(homes) {
				continue
			}
			homes[k] = it.Home
			n++
		}
		counts[k]++
	}
	best := 0
	for k := 1; k < n; k++ {
		if counts[k] > counts[best] {
			best = k
		}
	}
	return homes[best]
}

// advance moves g's rotation past m, the machine of g a batch went to.
func (g *group) advance(m *machine) {
	g.next = m.slot.Machine + 1
	if g.next == len(g.machines) {
		g.next = 0
	}
}

// startAt returns when a batch given to m now could start: when a lane of
// its own frees (now if one is free and nothing is queued) and, with a
// device, when the device's earliest lane frees; never before now.
func (m *machine) startAt(now time.Time) time.Time {
	at := maxTime(m.freeAt(), now)
	if m.dev != nil {
		at = maxTime(at, m.dev.freeAt())
	}
	return at
}

func (m *machine) earliestLane() int {
	j := 0
	for i := 1; i < len(m.est); i++ {
		if m.est[i].Before(m.est[j]) {
			j = i
		}
	}
	return j
}

func (d *Dispatcher) addLocked(it *Item, now time.Time, out *outList) {
	d.addToLocked(d.queueFor(), it, now, out)
}

// addToLocked adds it to q's open batch.
func (d *Dispatcher) addToLocked(q *queue, it *Item, now time.Time, out *outList) {
	b := q.open
	if b == nil {
		b = d.openLocked(q)
	}
	b.Items = append(b.Items, it)
	d.classesSeen |= 1 << classOf(it.Class)
	if !it.Deadline.IsZero() && (b.minDL.IsZero() || it.Deadline.Before(b.minDL)) {
		b.minDL = it.Deadline
		// Deadline-aware flush: the latest send time at which the batch
		// still ends by the oldest deadline on the machine that ends it
		// first, its lanes and pace counted (queue.sendBy); retimed at each
		// batch event of its machines (retimeLocked).
		at := q.sendBy(b.minDL, now)
		if !at.After(now) {
			d.dispatchLocked(q, now, out, ClosedDeadline)
			return
		}
		q.arm(at, now)
	}
	switch {
	case b.Size() >= b.target:
		d.dispatchLocked(q, now, out, ClosedFull)
	case d.early && q.idleMachine(b.g):
		if d.worthFlushing(q, b, now) {
			d.dispatchLocked(q, now, out, ClosedIdle)
		} else {
			d.recheckLocked(q, b, now)
		}
	}
}

// quietFactor: a quiet spell since the last arrival counts as a gap of
// quiet/quietFactor. Under Poisson arrivals one gap is longer than the mean 37%
// of the time but longer than three means only 5%.
const quietFactor = 3

// warmArrivals is how many arrivals a fresh dispatcher counts before its
// arrival-gap estimate alone decides.
const warmArrivals = 2 * int(1/gapWeight)

// recentArrivals is how many arrivals the burst rate spans.
const recentArrivals = 4

// gapWeight is the weight of the newest gap in FlushIdle's estimate.
const gapWeight = 0.1

// arrivedLocked updates the arrival-gap estimate with an arrival at now: the
// first gap measured seeds it when neither the plan nor Options gave one.
// Concurrent Submits read the clock before the lock, so a gap can come out
// negative: it counts as 0.
func (d *Dispatcher) arrivedLocked(now time.Time) {
	if !d.lastArrival.IsZero() {
		g := max(now.Sub(d.lastArrival).Seconds(), 0)
		if d.gap > 0 {
			// A quiet spell enters the estimate as quietFactor gaps at most:
			// gapEstimate already counts a quiet while it lasts, and taken
			// whole (a tenth of 0.5 s) it raised the estimate above the gap
			// a batch of one needs just as the next burst began, whose first
			// items then took the idle machines as small batches (issue 21:
			// every miss of the live burst test). A real fall in the rate
			// still raises the estimate, ×1.2 an arrival.
			g = min(g, quietFactor*d.gap)
		}
		if d.gap == 0 {
			d.gap = g
		} else {
			d.gap += gapWeight * (g - d.gap)
		}
	}
	if now.After(d.lastArrival) {
		d.lastArrival = now
	}
	d.arrived = min(d.arrived+1, warmArrivals)
	d.recent[d.recentI] = now
	d.recentI = (d.recentI + 1) % recentArrivals
}

// worthFlushing reports whether sending b, q's open batch, now, partial,
// passes the flush rule's guard: the estimated arrival gap (gapEstimate: the
// estimate, or a third of the time since the last arrival when that is
// longer) is at least the gap the rule needs (neededGap).
func (d *Dispatcher) worthFlushing(q *queue, b *Batch, now time.Time) bool {
	// The tolerance absorbs float rounding at a recheck timed for the very
	// gap needed (recheckLocked).
	return d.gapEstimate(now)*(1+1e-9) >= d.neededGap(q, b)
}

// gapEstimate returns the arrival gap, in seconds, that FlushIdle's guard
// assumes at now.
func (d *Dispatcher) gapEstimate(now time.Time) float64 {
	// A long quiet since the last arrival is itself evidence: after a burst,
	// the batch it left half full need not wait for its deadline. (Counting
	// the whole quiet, as in a first version, also flushed early after the
	// ordinary long gaps of Poisson arrivals: 84.7% against 87.5% attainment
	// at 1.2× the planned rate in simulation.)
	gap := d.baseGap(now)
	if oldest := d.recent[d.recentI]; !oldest.IsZero() {
		// A burst: the last recentArrivals arrivals came faster than the
		// estimate says. The estimate, weighted over many arrivals, learns
		// of a burst only when it is half over; by then its first items
		// have taken every idle machine as small batches (issue 11: peak
		// provisioning missed 99% on gamma arrivals under FlushIdle).
		gap = min(gap, now.Sub(oldest).Seconds()/(recentArrivals-1))
	}
	if !d.lastArrival.IsZero() {
		gap = max(gap, now.Sub(d.lastArrival).Seconds()/quietFactor)
	}
	return gap
}

// baseGap returns the weighted arrival gap, in seconds, or while the
// dispatcher warms up the mean gap since it was made (over at least one batch
// duration) if that is longer: the arrivals measured, not the planned rate,
// say what load there is. Issue 11: planned for 150k req/s, a fresh gateway
// held its first requests to their deadline.
func (d *Dispatcher) baseGap(now time.Time) float64 {
	if d.arrived < warmArrivals && d.arrived > 0 {
		return max(d.gap, max(now.Sub(d.born), d.st.maxDuration).Seconds()/float64(d.arrived))
	}
	return d.gap
}

// neededGap returns the least arrival gap, in seconds, at which sending b,
// q's open batch, partial, passes the guard (worthFlushing): the flush rule's.
func (d *Dispatcher) neededGap(q *queue, b *Batch) float64 {
	return d.frule.NeededGap(FlushView{d: d, q: q, b: b})
}

// recheckLocked arms q's timer for the earliest time at which, with no
// arrival before, the guard would pass (the burst's span grown long enough,
// or the quiet since the last arrival), if that is before the deadline
// flush: a batch the guard held for a burst that did not go on need not wait
// for its deadline when no batch ends to look at it again (idleFlushLocked).
// A recheck already due is left as it is (it re-arms itself when it fires)
// until the batch has doubled since it was computed; then an earlier one
// replaces it: as the batch grows, the gap the guard needs shrinks (about as
// 1/size), so a recheck is computed a few times a batch, not per arrival.
// (Issue 11, closed loops: the recheck kept as armed for the batch's first
// item, 3 × the gap a batch of one needs, held every batch of a closed loop
// about 10 ms on an idle machine after its clients had all come back.) It
// reports whether a recheck is armed.
func (d *Dispatcher) recheckLocked(q *queue, b *Batch, now time.Time) bool {
	pending := q.armed && q.wakeAt.After(now) && q.wakeAt.Before(q.flushAt)
	if pending && b.Size() < 2*q.wakeFor {
		return true // computed for a batch at least half this size
	}
	need := d.neededGap(q, b)
	// Rounded up, so that at the time returned the guard passes: truncated,
	// it failed there by a nanosecond and, no later recheck being due, the
	// batch waited for its deadline flush (issue 11: 101 ms in a closed
	// loop of 8 connections on a 3 ms batch).
	sec := func(s float64) time.Duration { return time.Duration(math.Ceil(s * float64(time.Second))) }
	at := d.lastArrival.Add(sec(quietFactor * need))
	if oldest := d.recent[d.recentI]; !oldest.IsZero() {
		saved := d.recent[d.recentI]
		d.recent[d.recentI] = time.Time{} // the estimate without the burst
		if d.gapEstimate(now) >= need {
			if t := oldest.Add(sec((recentArrivals - 1) * need)); t.Before(at) {
				at = t
			}
		}
		d.recent[d.recentI] = saved
	}
	q.wakeFor = b.Size()
	if pending && !q.wakeAt.After(at) {
		return true
	}
	if !q.armed || !at.Before(q.flushAt) || !at.After(now) {
		return false
	}
	q.wakeAt = at
	q.timer.Reset(at.Sub(now))
	return true
}

// idleMachine reports whether a machine that q's batches go to (q's own, or
// any of g's) has a free lane and nothing queued.
func (q *queue) idleMachine(g *group) bool {
	if q.m != nil {
		return q.m.idle()
	}
	return g.hasIdle() // inlined (go build -gcflags=-m): nothing more per request
}

func (m *machine) idle() bool { return m.hasLane() && m.pending.len() == 0 }

// idleFlushLocked is FlushIdle's half in Batch.Done: m has just freed a lane
// and, with nothing queued on it, an open batch that would go to m (its own
// stream's, as under RR; else a shared stream's whose group is m's, as TC's
// one batch) goes now, partial. A machine of
// a plan already replaced matches no open batch.
func (d *Dispatcher) idleFlushLocked(m *machine, now time.Time, out *outList) {
	if !m.idle() || d.closed {
		return
	}
	if q := m.q; q != nil {
		d.idleFlushQueueLocked(q, m, now, out)
		return
	}
	for _, q := range d.st.shared {
		d.idleFlushQueueLocked(q, m, now, out)
	}
}

func (d *Dispatcher) idleFlushQueueLocked(q *queue, m *machine, now time.Time, out *outList) {
	if b := q.open; b != nil && len(b.Items) > 0 && b.g == m.g {
		if d.worthFlushing(q, b, now) {
			d.dispatchLocked(q, now, out, ClosedIdle)
		} else {
			d.recheckLocked(q, b, now)
		}
	}
}

// retimeSooner brings q's armed deadline flush forward to at, when at is
// sooner: a recheck due before at stays armed; an at already passed fires
// at once.
func (q *queue) retimeSooner(at, now time.Time) {
	if !at.Before(q.flushAt) {
		return
	}
	q.flushAt = at
	if q.wakeAt.After(now) && q.wakeAt.Before(at) {
		return // a recheck comes first; fire then finds flushAt
	}
	q.wakeAt = at
	q.timer.Reset(max(at.Sub(now), 0))
}

func (q *queue) arm(at, now time.Time) {
	q.flushAt, q.wakeAt, q.armed = at, at, true
	if q.timer == nil {
		q.timer = q.d.clock.AfterFunc(at.Sub(now), q.fire)
	} else {
		q.timer.Reset(at.Sub(now))
	}
}

// fire is the flush timer of q: it sends the open batch, partial, when its oldest
// item cannot wait any longer, or, under FlushIdle, at a recheck that finds
// the guard passed and a machine idle.
func (q *queue) fire() {
	d := q.d
	var out outList
	d.mu.Lock()
	if q.open != nil && q.armed && !d.closed {
		now := d.clock.Now()
		switch {
		case !now.Before(q.flushAt):
			d.dispatchLocked(q, now, &out, ClosedDeadline)
		case d.early && len(q.open.Items) > 0 && q.idleMachine(q.open.g) && d.worthFlushing(q, q.open, now):
			d.dispatchLocked(q, now, &out, ClosedIdle) // a recheck (recheckLocked)
		case d.early && len(q.open.Items) > 0 && d.recheckLocked(q, q.open, now):
		default: // early or stale wake-up
			q.wakeAt = q.flushAt
			q.timer.Reset(q.flushAt.Sub(now))
		}
	}
	d.mu.Unlock()
	d.flush(&out)
}

func (d *Dispatcher) injectDummy() {
	var out outList
	d.mu.Lock()
	if d.closed || d.dummyEvery == 0 {
		d.mu.Unlock()
		return
	}
	now := d.clock.Now()
	d.stats.DummiesInjected++
	if d.early {
		d.arrivedLocked(now)
	}
	q := d.queueFor()
	b := q.open
	if b == nil {
		b = d.openLocked(q)
	}
	b.Dummies++
	if b.Size() >= b.target {
		d.dispatchLocked(q, now, &out, ClosedFull)
	}
	d.dummyNext = d.dummyNext.Add(d.dummyEvery)
	if !d.dummyNext.After(now) { // fell behind (real clock): skip, do not burst
		d.dummyNext = now.Add(d.dummyEvery)
	}
	d.dummyTimer.Reset(d.dummyNext.Sub(now))
	d.mu.Unlock()
	d.flush(&out)
}

// dispatchLocked closes q's open batch and hands it to a machine: started now if
// the machine has a free lane, else queued behind the machine's earlier batches.
func (d *Dispatcher) dispatchLocked(q *queue, now time.Time, out *outList, why Closer) {
	b := q.open
	q.open = nil
	if q.armed {
		q.armed = false
		q.timer.Stop()
	}
	if len(b.Items) == 0 { // dummies only: nothing to run
		d.stats.DummiesDropped += uint64(b.Dummies)
		d.recycleLocked(b)
		return
	}
	d.stats.Closed[why]++
	// The one machine choice (Dispatcher.target): the machine Predict and
	// admission assumed and the deadline flush timed the batch by, as the
	// lanes stand now, a spare where the batch would end late. Without
	// spares that is target's pick alone: when the batch ends is not needed.
	var m *machine
	if d.local && q.m == nil {
		m = b.g.freeOn(b.home(), now)
	}
	committed := false
	switch {
	case m != nil:
		d.stats.Local++
	case !d.beyondPick():
		m, _ = d.pick(q, b.g, b, b.minDL, now)
	default:
		m, _, _, _, committed = d.target(q, b.g, b, nil, b.minDL, now, true)
	}
	switch {
	case m.slot.Group < 0:
		d.stats.Overflow++
	case committed:
		d.stats.LateCommitted++
	case q.m == nil && m.g == b.g:
		b.g.advance(m)
	}
	m.place(b, now)
	if m.idle() {
		d.startLocked(b, now, out)
	} else {
		m.pending.push(b)
	}
	d.retimeLocked(m, now)
	d.publishLocked(now)
}

// place gives b to m: the lane of m that frees first, and the device's,
// count it from when both are free for its expected duration.
func (m *machine) place(b *Batch, now time.Time) {
	b.m, b.Slot = m, &m.slot
	lane := m.earliestLane()
	start := maxTime(m.est[lane], now)
	dur := m.duration()
	if m.dev != nil {
		b.dev, b.onDev = m.dev.reserve(start, dur), true
		m.est[lane] = b.dev.end
		return
	}
	m.est[lane] = start.Add(dur)
}

// startLocked takes a lane of b.m for b after failing the items whose expiry has
// passed or whose request was abandoned; b goes on out to be sent (or, with no item left, just to complete the
// expired ones) once the lock is released.
func (d *Dispatcher) startLocked(b *Batch, now time.Time, out *outList) {
	kept := b.Items[:0]
	for _, it := range b.Items {
		switch {
		case it.expired(now):
			it.Err = ErrDeadline
			b.expired = append(b.expired, it)
			d.stats.DeadlineOnSend++
		case it.abandoned():
			it.Err = ErrCancelled
			b.expired = append(b.expired, it)
			d.stats.Cancelled++
		default:
			kept = append(kept, it)
		}
	}
	clear(b.Items[len(kept):])
	b.Items = kept
	if len(kept) == 0 {
		d.stats.DummiesDropped += uint64(b.Dummies)
		if len(b.expired) == 0 {
			d.recycleLocked(b)
			return
		}
		out.push(b)
		return
	}
	m := b.m
	m.busy++
	if m.lanes != nil {
		m.lanes.busy++
	}
	m.running = append(m.running, b)
	m.stats.Batches++
	m.stats.Items += uint64(len(kept))
	m.stats.Dummies += uint64(b.Dummies)
	b.Sent = now
	dur := m.duration()
	b.end = now.Add(dur)
	if b.onDev {
		b.end = maxTime(m.dev.endOf(b.dev), b.end)
	}
	b.wait = b.end.Sub(now) - dur
	out.push(b)
}

// flush acts on the batches made ready under the lock: fails their expired and abandoned items,
// then sends them (or recycles those left empty).
func (d *Dispatcher) flush(out *outList) {
	for b := out.head; b != nil; {
		next := b.link
		b.link = nil
		if len(b.expired) > 0 {
			now := d.clock.Now()
			for i, it := range b.expired {
				b.expired[i] = nil
				it.Finished = now // Err set by startLocked
				it.Done(it)
			}
			b.expired = b.expired[:0]
		}
		if len(b.Items) > 0 {
			d.sender.Send(b)
		} else {
			d.mu.Lock()
			d.recycleLocked(b)
			d.mu.Unlock()
		}
		b = next
	}
}

func (d *Dispatcher) recycleLocked(b *Batch) {
	if b.onDev { // counted on its device, never run there
		b.m.dev.cancel(b.dev, d.clock.Now())
	}
	clear(b.Items)
	b.Items = b.Items[:0]
	b.Dummies, b.Slot, b.g, b.m, b.target = 0, nil, nil, nil, 0
	b.minDL, b.Sent, b.end, b.wait, b.dev, b.onDev = time.Time{}, time.Time{}, time.Time{}, 0, deviceTicket{}, false
	b.link = d.free
	d.free = b
}

// Close stops the dispatcher: later Submits fail with ErrClosed, queued items
// complete with ErrClosed, batches already sent finish normally.
func (d *Dispatcher) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	if d.dummyTimer != nil {
		d.dummyTimer.Stop()
	}
	if d.relaxTimer != nil {
		d.relaxTimer.Stop()
	}
	items := d.drainLocked()
	d.mu.Unlock()
	now := d.clock.Now()
	for _, it := range items {
		it.Err, it.Finished = ErrClosed, now
		it.Done(it)
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Slots = make([]SlotStats, len(d.st.machines))
	for i, m := range d.st.machines {
		s.Slots[i] = m.stats
	}
	if len(d.spare) > 0 {
		s.Spare = make([]SlotStats, len(d.spare))
		for i, m := range d.spare {
			s.Spare[i] = m.stats
		}
	}
	return s
}

// Slots returns the current plan's machines in rank order.
func (d *Dispatcher) Slots() []Slot {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := make([]Slot, len(d.st.machines))
	for i, m := range d.st.machines {
		s[i] = m.slot
	}
	return s
}

// IsDeadline reports whether err is (or wraps) ErrDeadline.
func IsDeadline(err error) bool { return errors.Is(err, ErrDeadline) }
