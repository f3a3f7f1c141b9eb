package dispatcher

import (
	"math"
	"time"
)

// Predict returns how long an item submitted now, with no deadline of its
// own, would take at least, from now to its completion, on the machine its
// batch would go to (Dispatcher.target, the one machine choice that
// dispatch, the deadline flush and admission share): the wait for a lane of
// that machine and of its backend's device, as the dispatcher has them
// queued (each lane's estimated free time, from the expected durations of
// the batches running and queued there), plus the batch's expected
// duration, both scaled by the group's measured slowness; on a spare
// machine (SetSpare) when the open batch's items would be done too late on
// the group's. It does not count the wait for batch-mates: that wait ends
// by the deadline flush, which is timed to meet the item's deadline
// (docs/dataplane.md, "Admission"). The batch goes to the group of the
// open batch the item would join (under TC, the group chosen when it
// opened; with no open batch, the group the next one opens for). Under a
// Policy of its own, outside this package, the earliest of all groups.
//
// Admission (Options.Admission) checks the same end against Item.Due, and
// admits beyond it in one case only: where the spares are kept back from
// an idle machine that would end the batch late (target's kept,
// admitsLocked). O(1) while the machine next in rotation
// is free, no allocation; any goroutine.
func (d *Dispatcher) Predict(now time.Time) time.Duration {
	_, at := d.predictMachine(now, nil)
	return at.Sub(now)
}

// predictMachine is Predict for it (nil: an item with no deadline of its
// own; else as admission predicts it, its deadline counted in the batch's)
// with the machine it assumes (nil after Close).
func (d *Dispatcher) predictMachine(now time.Time, it *Item) (*Slot, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, now
	}
	st := d.st
	var m *machine
	var at time.Time
	if p := st.peeker; p != nil {
		q := st.queues[p.PeekJoin()]
		b := q.open
		var g *group
		switch {
		case b != nil:
			g = b.g
		case q.m != nil:
			g = q.m.g
		default:
			g = st.groups[p.PeekOpen(q.stream)]
		}
		dl := time.Time{}
		if b == nil {
			b = &noBatch
		} else {
			dl = b.minDL
		}
		if it != nil && !it.Deadline.IsZero() && (dl.IsZero() || it.Deadline.Before(dl)) {
			dl = it.Deadline
		}
		m, at, _, _, _ = d.target(q, g, b, it, dl, now, true)
	} else {
		for _, g := range st.groups {
			if o, t, _, _, _ := d.target(nil, g, &noBatch, nil, time.Time{}, now, true); m == nil || t.Before(at) {
				m, at = o, t
			}
		}
	}
	return &m.slot, at
}

// noBatch stands for a batch not yet open (no item) where Dispatcher.target
// needs one; never written.
var noBatch Batch

// target is the one machine choice: the machine a batch of q's, of group
// g, closed now goes to, and when it would complete there. Dispatch
// (dispatchLocked) sends it there; Predict and admission (admitsLocked)
// predict it there; the deadline flush (queue.sendBy) times it by that
// machine. In order:
//
//  1. q's own machine (a stream of one machine, as under RR), else g's
//     choice: the machine that ends the batch first within dl, its oldest
//     deadline (zero: none), free machines first (group.choose);
//  2. in place of a machine that is down, or a straggler while its group
//     has an idle machine that is not, the machine health gives
//     (Dispatcher.reroute, health.go);
//  3. with spares (spares true), when the batch would complete there after
//     its earliest item is due (it's Due with it, admission's; else the
//     batch's items'), less the margin admission keeps (queuedMargin), and
//     the machine is busy, or idle but slower than
//     planned while another of its group is faster by a tenth: the spare
//     machine (SetSpare) that holds the batch and completes it first in
//     time, or, with none in time, one that completes it sooner. A batch
//     closed by its deadline flush was timed to end when due on its
//     group's best machine; when that machine was taken meanwhile, an idle
//     spare as fast ends it a timer's lateness late, and the strict rule
//     queued it behind the busy machine (one device 1.6x, seed 6: 21 ms
//     late, 3 504s, beside three idle spares 1 ms short of its due).
//
// kept reports that step 3 kept the spares back from a batch that would
// be late on the idle machine it goes to (a machine as planned, or every
// machine of its group slower than planned: then the plan is short of
// machines, and the spares are kept for the batches its busy machines
// cannot take; every device 1.6x: overflowing the idle ones' batches too
// refused 338 requests in the first 10 s, against 178). Admission reads it
// (admitsLocked). committed reports that Options.LateCommit moved the
// batch to another planned group's machine (lateCommitFor; before step 3).
//
// The completion is now + (the wait for the machine's lane and device +
// its duration) × its group's measured ratio (predictAt). b is the batch
// (its size; &noBatch when none is open), it the item that would join it
// (nil: none). The dispatcher's lock must be held; O(1) while the machine
// next in rotation is free, no allocation.
func (d *Dispatcher) target(q *queue, g *group, b *Batch, it *Item, dl, now time.Time, spares bool) (m *machine, end time.Time, margin time.Duration, kept, committed bool) {
	m, start := d.pick(q, g, b, dl, now)
	// Where classes mix, the high class keeps a third at a surge's onset
	// too (marginFor): promotion serves it ahead of the queue that
	// admission predicts it behind.
	onset := it == nil || classOf(it.Class) > 0 || d.classesOffered&(d.classesOffered-1) == 0
	end, margin = d.endOn(m, start, now, onset)
	if !spares || !d.beyondPick() {
		return m, end, margin, false, false
	}
	due := d.dueOn(b, it, m.g.duration, now)
	if due.IsZero() || !end.Add(margin).After(due) {
		return m, end, margin, false, false
	}
	if d.late {
		if o, e := d.lateCommitFor(b, it, m.g, now); o != nil {
			return o, e, 0, false, true // idle: it starts now, nothing queued ahead
		}
	}
	if len(d.spare) == 0 {
		return m, end, margin, false, false
	}
	if m.idle() && !(m.duration() > m.slot.Duration && m.g.hasFasterPeer(m)) {
		return m, end, margin, true, false
	}
	if s, e, _ := d.spareFor(b, it, end, now); s != nil {
		return s, e, d.queuedMargin(s, e, now, onset), false, false
	}
	return m, end, margin, false, false
}

// beyondPick reports whether target may send a batch elsewhere than pick's
// machine: to a spare (SetSpare) or, with Options.LateCommit, to another
// planned group's machine.
func (d *Dispatcher) beyondPick() bool { return len(d.spare) > 0 || d.late }

// lateCommitFor returns, with Options.LateCommit, where a batch b (with it,
// when not nil) that would end late on its group g's machine goes instead,
// and when it ends there: among the idle machines of the module's other
// planned groups that hold b (their batch ≥ its size), are up and end it
// by its Due, the one whose machine time costs least (price × duration;
// ties: the earlier end). Spares come after (target's step 3): the
// planned machines are paid for either way. A machine of another group qualifies
// only if b ends there before every batch open for that group (or for the
// machine's own stream) must be sent (freeBefore), so an item admitted for
// that group is not made late. nil when none qualifies.
// Under d.mu; O(machines), per batch closed late, never per request in
// time.
func (d *Dispatcher) lateCommitFor(b *Batch, it *Item, g *group, now time.Time) (*machine, time.Time) {
	size := b.Size()
	if it != nil {
		size++
	}
	var best *machine
	var bestEnd time.Time
	var bestCost float64
	for _, o := range d.st.machines {
		if o.g == g || o.slot.Batch < size || !o.idle() || o.isDown() {
			continue
		}
		dur := o.duration()
		e := predictAt(o, o.startAt(now), now)
		if e.After(d.dueOn(b, it, o.g.duration, now)) || !d.freeBefore(o, e, now) {
			continue
		}
		price := o.slot.Cost
		if o.slot.Occupancy > 0 {
			price /= o.slot.Occupancy
		}
		c := price * dur.Seconds()
		if best == nil || c < bestCost || c == bestCost && e.Before(bestEnd) {
			best, bestEnd, bestCost = o, e, c
		}
	}
	return best, bestEnd
}

// freeBefore reports whether a batch placed on o now, ending at end, leaves
// o free by the latest send (queue.sendBy, as the lanes stand now) of every
// batch open for o's group or o's own stream.
func (d *Dispatcher) freeBefore(o *machine, end, now time.Time) bool {
	inTime := func(q *queue) bool {
		return q == nil || q.open == nil || q.open.minDL.IsZero() || !end.After(q.sendBy(q.open.minDL, now))
	}
	if !inTime(o.q) {
		return false
	}
	for _, q := range d.st.shared {
		if q.open != nil && q.open.g == o.g && !inTime(q) {
			return false
		}
	}
	return true
}

// endOn is predictAt and queuedMargin of a batch that starts on m at start,
// m's duration (its health's atomics) read once. A batch that starts now
// has nothing queued ahead of it: no margin.
func (d *Dispatcher) endOn(m *machine, start, now time.Time, onset bool) (end time.Time, margin time.Duration) {
	dur := m.duration()
	end = endAfter(m, dur, start, now)
	if !start.After(now) {
		return end, 0
	}
	return end, d.marginFor(float64(dur)*m.g.slow, end, now, onset)
}

// pick is target's first two steps: the machine b goes to (q's own, or its
// group's choice), moved off a down or straggling one (reroute), and when b
// would start there. The deadline flush (queue.sendBy) needs the machine
// only, not when b would end there.
func (d *Dispatcher) pick(q *queue, g *group, b *Batch, dl, now time.Time) (m *machine, start time.Time) {
	if q != nil && q.m != nil {
		m = q.m
		start = m.startAt(now)
	} else {
		m, start = g.choose(now, dl)
	}
	if m.health != nil {
		if r := d.reroute(b, m); r != m {
			m, start = r, r.startAt(now)
		}
	}
	return m, start
}

// spareFor returns the spare machine a batch b (with it, when not nil)
// that would end at end on its group's machine goes to (target's step 3),
// when it completes there, and whether in time; nil when none is up, holds
// the batch, and is in time or sooner than end.
func (d *Dispatcher) spareFor(b *Batch, it *Item, end, now time.Time) (*machine, time.Time, bool) {
	size := b.Size()
	if it != nil {
		size++
	}
	var best *machine
	var bestEnd time.Time
	bestInTime := false
	for _, s := range d.spare {
		if s.slot.Batch < size || s.isDown() {
			continue
		}
		e := predictAt(s, s.startAt(now), now)
		inTime := !e.After(d.dueOn(b, it, s.g.duration, now))
		switch {
		case inTime && (!bestInTime || e.Before(bestEnd)):
			best, bestEnd, bestInTime = s, e, true
		case !inTime && !bestInTime && e.Before(end) && (best == nil || e.Before(bestEnd)):
			best, bestEnd = s, e
		}
	}
	return best, bestEnd, bestInTime
}

// dueOn returns when the batch must be done on a machine of duration dur:
// it's Due (admission: the item that would join), else the earliest Due of
// b's items (zero: none is bounded).
func (d *Dispatcher) dueOn(b *Batch, it *Item, dur time.Duration, now time.Time) time.Time {
	if it != nil {
		return d.dueFor(it, dur, now)
	}
	return b.due(dur)
}

// Lag returns about how long an item arriving now would take to complete
// on the module's machines: the time its batch takes to fill at the
// measured arrival gap (at most the module's budget less the batch's
// duration), Predict's wait for a lane and the duration, for the group (or
// spare machine, SetSpare) that would complete it first, read without the
// lock from a
// snapshot the dispatcher publishes at each batch it dispatches or that
// ends (so it lags the queue by at most one batch event). The gateway
// reserves the Lag of the modules after this one, on the DAG's longest
// path, when it decides how late an item may finish here (Item.DoneBy). Any
// goroutine; two atomic loads, no allocation.
func (d *Dispatcher) Lag(now time.Time) time.Duration {
	wait := time.Duration(d.lagFree.Load() - now.UnixNano())
	return max(wait, 0) + time.Duration(d.lagDur.Load())
}

// publishLocked stores Lag's snapshot: of the groups, the one whose batch
// closed now would complete first. Ends are kept as durations from now and
// the arrival gap is estimated once, not per group: it runs at every batch
// event, which BenchmarkSubmit's idle cases make one a request.
func (d *Dispatcher) publishLocked(now time.Time) {
	gap := d.gap
	if d.early {
		gap = d.gapEstimate(now)
	}
	best := time.Duration(-1)
	var free, dur time.Duration
	// consider a batch that starts on m at start, filled in fill.
	consider := func(m *machine, slow float64, start time.Time, fill time.Duration, capFill bool) time.Duration {
		du := time.Duration(float64(m.duration()) * slow)
		var wait time.Duration
		if start.After(now) {
			wait = time.Duration(float64(start.Sub(now)) * slow)
		}
		if capFill && d.st.budget > du {
			fill = min(fill, d.st.budget-du)
		}
		if end := wait + du + fill; best < 0 || end < best {
			best, free, dur = end, wait, du+fill
		}
		return fill
	}
	minFill := time.Duration(math.MaxInt64)
	for _, g := range d.st.groups {
		m, start := g.choose(now, now) // every machine "late": the one that ends a batch first
		minFill = min(minFill, consider(m, g.slow, start, d.fillLocked(g, gap), true))
	}
	// A spare machine takes a batch the plan's machines would finish too
	// late (target's spare step): the modules before this one reserve for it too,
	// with the fill of the batch it would take.
	for _, m := range d.spare {
		if m.isDown() {
			continue
		}
		consider(m, m.g.slow, m.startAt(now), minFill, false)
	}
	d.lagFree.Store(now.UnixNano() + int64(free))
	d.lagDur.Store(int64(dur))
}

// fillLocked returns how long an item arriving now waits for batch-mates
// in g's batch at gap, the arrival gap (s) the dispatcher measures
// (gapEstimate; under FlushDeadline the plan's): (k−1) gaps, k the batch
// size FlushIdle's guard would let go at that gap (1 at low load: a lone
// item goes at once to an idle machine; g's batch at the planned rate), or
// g's batch under FlushDeadline.
func (d *Dispatcher) fillLocked(g *group, gap float64) time.Duration {
	k := float64(g.batch)
	if d.early && gap > 0 {
		k = min(k, math.Ceil(d.st.maxLoad/(idleFlushUtilization*gap)))
	}
	if gap <= 0 || k <= 1 {
		return 0
	}
	return time.Duration((k - 1) * gap * float64(time.Second))
}

// admitsLocked is Options.Admission's rule for it joining b, q's open batch:
// it completes by its Due on the machine the batch would go to
// (Dispatcher.target, its deadline counted in the batch's), a spare machine
// included where b would overflow there. One case admits beyond that, as
// admission did before the choice was one: the batch would end late on the
// idle machine it goes to, the spares kept back from it (target's kept),
// and a spare that holds b with it would complete it in time. The module
// has the capacity in time, if not where the batch goes; the batch runs on
// the idle machine (a partial batch there ends sooner than the full one
// predicted). Above all this is the case of a plan whose every device runs
// slower than it was made for: refusing there refuses everything, nothing
// runs on the slow devices, and nothing measures them for the plan that
// would mend it (the reverted rework: 513 of the first 521 requests refused
// with every device 1.6x; docs/calibration.md, "Admission from the measured
// pace"; TestEverySlowDeviceStillServes).
func (d *Dispatcher) admitsLocked(q *queue, b *Batch, it *Item, now time.Time) bool {
	dl := b.minDL
	if !it.Deadline.IsZero() && (dl.IsZero() || it.Deadline.Before(dl)) {
		dl = it.Deadline
	}
	m, end, margin, kept, _ := d.target(q, b.g, b, it, dl, now, true)
	due := d.dueFor(it, m.g.duration, now)
	if due.IsZero() || !end.Add(margin).After(due) {
		return true
	}
	if kept {
		_, _, inTime := d.spareFor(b, it, end, now)
		return inTime
	}
	return false
}

// queuedMargin returns the margin admission keeps before an item's Due when
// its batch would end at end on m: Options.HandoffMargin for each batch
// ahead of it on the lane (the predicted wait, end less now and the batch's
// own duration as predictAt scales them, over that duration); none on an
// idle machine, so a lone item is admitted when its batch alone ends in
// time. O(1), no allocation.
func (d *Dispatcher) queuedMargin(m *machine, end, now time.Time, onset bool) time.Duration {
	return d.marginFor(float64(m.duration())*m.g.slow, end, now, onset)
}

// marginFor is queuedMargin for a batch of scaled duration own (ns):
// HandoffMargin for each batch ahead and, while the module is offered items
// faster than surgeFactor × its planned rate (a surge: surgeEst, the gap
// between the items offered to admission, refused ones included, below the
// plan's over surgeFactor), at least surgeShare of the module's budget, and
// over the surge's first surgeOnset, while it is three times the plan or
// more, onsetShare of it (at most the budget
// less two of its batches, so that one batch still waits behind the running
// one). Under a surge the queue never drains: a queue shorter by that share
// costs an open-loop client no goodput, and the host that the surge's
// clients and connections load stalls the gateway and the backends for tens
// of milliseconds at its start, which every item admitted closer to its Due
// pays with a 504 (issue 32's 4x overload: every 504 came in the first
// 100 ms of the 4x run, as the load generator opened its connections, each
// batch's round trip about 3x; docs/traffic.md, "The surge margin"). Only
// the onset keeps two thirds: a closed loop whose refusals are held (600
// connections of hey) lost a third of its goodput to two thirds kept
// throughout. Where two classes or more are offered, the high class (onset
// false) keeps a third at the onset too:
// admission predicts its items behind the whole queue, which promotion
// serves them ahead of, and two thirds refused 22 of its first 30 items in a
// 4x surge of mixed classes (TestPriorityUnderOverloadLive). A module served at its planned rate keeps the per-batch margin
// only, however deep its queue (every device 1.6x slower than planned: a
// fixed share of the budget refused 118 of 2,055 requests after the first
// 10 s, against 25). An item whose batch would start at once keeps no
// margin: a lone item is admitted when its batch alone ends in time.
func (d *Dispatcher) marginFor(own float64, end, now time.Time, onset bool) time.Duration {
	if d.handoff <= 0 {
		return 0
	}
	w := float64(end.Sub(now)) - own
	if w <= 0 || own <= 0 {
		return 0
	}
	m := w / own * float64(d.handoff)
	if d.early && d.surgeSince != 0 {
		share := surgeShare
		if onset && now.UnixNano()-d.surgeSince < surgeOnset && 2*d.surgeEst < d.st.surgeGap {
			// At most what leaves one batch queued behind the running
			// one: a module whose batch is long beside its budget keeps
			// its lane busy and its batches full.
			share = min(onsetShare, 1-2*own/float64(d.st.budget))
		}
		m = max(m, share*float64(d.st.budget))
	}
	return time.Duration(m)
}

// offeredGapLocked adds an item offered to admission at now to surgeEst.
// Per item, under the lock, at the modules with a HandoffMargin only: a
// subtraction and a multiply.
func (d *Dispatcher) offeredGapLocked(now time.Time) {
	ns := now.UnixNano()
	// surgeEst starts at the plan's gap (SetPlan); without a planned rate
	// there is no surge to tell and nothing to estimate.
	if last := d.lastOffered; last != 0 && d.surgeEst > 0 {
		// A quiet spell counts as quietFactor gaps at most, as in the idle
		// flush's estimate: the pause before a surge (a client starting up)
		// otherwise lifted the estimate tenfold, and the surge's first 20 ms
		// went unseen, the stall of its start among them.
		g := min(max(ns-last, 0), quietFactor*d.surgeEst)
		d.surgeEst += (g - d.surgeEst) / surgeSpan // integer: BenchmarkSubmit's margin case
	}
	d.lastOffered = max(d.lastOffered, ns)
	switch {
	case d.surgeEst <= 0 || d.surgeEst >= d.st.surgeGap:
		d.surgeSince = 0
	case d.surgeSince == 0:
		d.surgeSince = ns
	}
}

// surgeFactor is how many times its planned rate a module must be offered
// for admission to keep its surge margin (marginFor), and surgeShare that
// margin, a share of the module's budget. 1/surgeSpan is the weight of the
// newest gap in the surge's estimate:
// about fifty arrivals, 8 ms at 6,000 req/s, 1 s at 50 req/s. Poisson
// arrivals at the planned rate put the estimate below the plan's gap over
// surgeFactor at one arrival in about 17,000 (simulated, 2 million
// arrivals); at FlushIdle's weight, 0.1, it would be one in 20.
const (
	surgeFactor = 1.5
	surgeShare  = 1.0 / 3
	surgeSpan   = 50
	// onsetShare is the surge margin's share of the budget over the
	// surge's first surgeOnset (ns), at most the budget less two batches,
	// while the items offered outrun three times the planned rate (surgeEst
	// below half of surgeGap): hey's 30 workers paced at the planned rate
	// send their requests in clumps of 30, which pass for a surge of 1.5x,
	// and two thirds refused 22 of 1,800 of them (scripts/kill-live.sh).
	onsetShare = 2.0 / 3
	surgeOnset = int64(300 * time.Millisecond)
)

// predictAt returns when an item in a batch that starts on m at start
// would complete: the wait for the lane, of the machine's own batches and
// of those other dispatchers sent to its device, and the machine's
// expected duration, both scaled by its group's high percentile of
// measured/expected durations (a queue of batches jittered ±20% does not
// average out the spread: the items admitted last are those its error
// makes late).
func predictAt(m *machine, start, now time.Time) time.Time {
	return endAfter(m, m.duration(), start, now)
}

// endAfter is predictAt for m's expected duration dur.
func endAfter(m *machine, dur time.Duration, start, now time.Time) time.Time {
	if m.g.slow == 1 { // as measured, mostly: one Add, no Sub, no float (BenchmarkSubmit)
		return start.Add(dur)
	}
	return now.Add(time.Duration(float64(start.Sub(now)+dur) * m.g.slow))
}

// sendBy returns when the deadline flush sends q's open batch, whose oldest
// deadline is dl: the latest time at which the batch still ends by dl on
// the machine it would go to (Dispatcher.target without the spares: a
// batch late on its group's machines is sent at once and overflows then),
// that is dl less the machine's duration as the flush counts it
// (machine.flushDuration: its pace, or a straggler's slowness) scaled by
// its group's measured ratio, as Predict scales it. Admission reads the
// same machine, so an item admitted is one the flush sends in time, as the
// lanes stand.
// Before, the lead was the planned duration times the pace of the machine
// Predict assumed, a straggler's counted as 1 (docs/calibration.md, "The
// deadline flush").
//
// When even that machine ends the batch after dl, the time returned is
// before its lane frees, and the batch goes no later than then: closing it
// when the lane frees would end it no later, but the items arriving
// meanwhile would join a batch already late (tried: 15 504s against 2 with
// one device slowing step by step). As cheap as target, once a batch and
// when retimeLocked retimes it.
func (q *queue) sendBy(dl, now time.Time) time.Time {
	m, _ := q.d.pick(q, q.open.g, q.open, dl, now) // target's machine, without the spares: no end needed
	du := m.flushDuration()
	if s := m.g.slow; s != 1 {
		du = time.Duration(float64(du) * s)
	}
	return dl.Add(-du)
}

// retimeLocked brings the deadline flush of the open batches m's lanes
// bear on (its own stream's, and the shared streams' filled for its group)
// forward to queue.sendBy as the lanes now stand: called after a batch is
// placed on m, or ends there later than expected (the lanes may then free
// later than counted, and the group's ratio rose; a batch on time leaves
// them as counted), so a batch whose machine was taken in the meantime, or
// turned slower, is sent while it still ends by its oldest deadline.
// Never later than armed: a flush moved later as a
// machine freed filled batches to their deadline exactly, and every stall
// of the host became a 504 (tried: one device slowing step by step, 15
// 504s against 2). O(streams), per batch event, never per request.
func (d *Dispatcher) retimeLocked(m *machine, now time.Time) {
	if q := m.q; q != nil {
		if q.open != nil && q.armed && !q.open.minDL.IsZero() {
			q.retimeSooner(q.sendBy(q.open.minDL, now), now)
		}
		return
	}
	for _, q := range d.st.shared {
		if b := q.open; b != nil && b.g == m.g && q.armed && !b.minDL.IsZero() {
			q.retimeSooner(q.sendBy(b.minDL, now), now)
		}
	}
}

// The group's measured/expected ratio: slow tracks a high percentile of it.
// A batch
// above slow raises it by a tenth of the gap (at least slowStep), one below
// lowers it by a 500th of the gap (at least slowStep/99): it settles where
// about 1% of batches are above it, follows a backend that turns slower in
// tens of batches, and one batch stalled by the host (a 2-core machine
// starving the backend's timer) moves it by a tenth of the stall, not half
// as a plain upper envelope would. A backend that turns slow for good is
// the straggler measure's (MachineHealth, health.go), which scales the
// expected duration itself, so the ratio returns to about 1.
const (
	slowStep = 0.01
	slowUp   = 0.1
	slowDown = 0.002
	minRatio = 0.5 // a profile may be pessimistic, within reason
	maxRatio = 10
)

// observe updates g's ratios with a batch that took took, expected to take
// expect (Batch.end − Batch.Sent: a full batch's duration), ending at now;
// full says the batch held the slot's batch size, dummies counted. It
// reports whether slow is above 1 after it. Only a full batch lowers slow: a
// partial one ends sooner than a full one on any backend whose time grows
// with the batch, and at low load, where FlushIdle sends most items alone,
// it sank slow to 0.84 in 300 batches (TestPartialBatchesKeepTheRatio);
// predictions and the deadline flush then counted a full batch 16% short,
// and the batches of the next burst ended late. A partial batch slower than
// a full one's expected time still raises it.
func (g *group) observe(took, expect time.Duration, now time.Time, full bool) bool {
	if expect <= 0 {
		return g.slow > 1
	}
	g.seen = now
	r := min(max(float64(took)/float64(expect), minRatio), maxRatio)
	if r > g.slow {
		g.slow = min(g.slow+max(slowStep, slowUp*(r-g.slow)), r)
	} else if full {
		g.slow = max(g.slow-max(slowStep/99, slowDown*(g.slow-r)), r)
	}
	return g.slow > 1
}

// slowStale is how long a group's slowness stands with no batch measuring
// it, on a group with an idle machine, before the dispatcher halves its
// excess over 1 (group.relax, Dispatcher.relaxStale).
const slowStale = time.Second

// relax lowers g's slowness when it has gone stale: g has an idle machine and
// no batch of g has measured it for slowStale. Without this a few batches
// stalled by the host (a loaded machine starving a backend's timers) could
// raise slow past due/duration and lock admission for good: every item
// refused, here or upstream (Stage.Reserve reads Lag, which slow scales),
// nothing sent, nothing measured, slow never lowered. Each slowStale idle
// halves the excess (1.8 → 1.4 → 1.2 …, 1 once under slowStep), so an idle
// group takes items again within seconds; a device that is truly slow raises
// it again with its next batches (and its pace, health.go, scales the expected
// duration beside it). Reports whether slow moved. The dispatcher's lock must
// be held.
func (g *group) relax(now time.Time) bool {
	if g.slow <= 1 || now.Sub(g.seen) < slowStale || !g.hasIdle() {
		return false
	}
	g.slow, g.seen = 1+(g.slow-1)/2, now
	if g.slow-1 < slowStep {
		g.slow = 1
	}
	return true
}

// armRelaxLocked arms the relax timer (relaxStale, every slowStale/4, so a
// group relaxes within a quarter of slowStale of going stale) unless it is
// armed: called when a group's slowness is above 1 after a batch, so the
// timer runs only while one is. The dispatcher's lock must be held.
func (d *Dispatcher) armRelaxLocked() {
	if d.relaxArmed || d.closed {
		return
	}
	d.relaxArmed = true
	if d.relaxTimer == nil {
		d.relaxTimer = d.clock.AfterFunc(slowStale/4, d.relaxStale)
	} else {
		d.relaxTimer.Reset(slowStale / 4)
	}
}

// relaxStale is the relax timer: every slowStale/4 while a group's
// slowness is above 1, it relaxes the stale ones (group.relax) and republishes Lag.
func (d *Dispatcher) relaxStale() {
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.relaxArmed = false
	if d.closed {
		return
	}
	moved, above := false, false
	for _, g := range d.st.groups {
		moved = g.relax(now) || moved
		above = above || g.slow > 1
	}
	if moved {
		d.publishLocked(now)
	}
	if above {
		d.armRelaxLocked()
	}
}

// freeAt returns when a batch dispatched to m now could start: zero (now) if
// m is idle, else the estimated free time of its earliest lane (which counts
// the batches queued on m).
func (m *machine) freeAt() time.Time {
	if m.idle() {
		return time.Time{}
	}
	return m.est[m.earliestLane()]
}

// hasFasterPeer reports whether a machine of g runs its batches faster than
// m by more than a tenth (pace and straggler slowness counted): m is slow
// against its peers, not the plan against its devices. The tenth keeps a
// peer measured 1% off its profile from reading as slow. O(machines);
// called only for a batch whose idle machine is slower than planned.
func (g *group) hasFasterPeer(m *machine) bool {
	du := float64(m.duration())
	for _, o := range g.machines {
		if float64(o.duration())*1.1 < du {
			return true
		}
	}
	return false
}

// hasIdle reports whether a machine of g is idle.
func (g *group) hasIdle() bool {
	for _, m := range g.machines {
		if m.idle() {
			return true
		}
	}
	return false
}

// finished takes b off m's running batches.
func (m *machine) finished(b *Batch) {
	for i, r := range m.running {
		if r == b {
			last := len(m.running) - 1
			m.running[i] = m.running[last]
			m.running[last] = nil
			m.running = m.running[:last]
			return
		}
	}
}

// resync recomputes m's lane estimates when a batch ends at now: the lanes of the
// batches still running end when they were expected to when sent (now if
// that has passed), the others are free now, and the queued batches take the
// earliest lane in turn. Backends are not as regular as their profiles;
// without this, the estimates would drift from the machine's real queue.
// O(lanes × queued), per batch.
func (m *machine) resync(now time.Time) {
	for i := range m.est {
		m.est[i] = now
		if i < len(m.running) {
			if end := m.running[i].end; end.After(now) {
				m.est[i] = end
			}
		}
	}
	for range m.pending.len() {
		lane := m.earliestLane()
		m.est[lane] = m.est[lane].Add(m.duration())
	}
}
