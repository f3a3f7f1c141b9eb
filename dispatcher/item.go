package dispatcher

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Item is one request to one module. The caller owns it: it fills Arrival,
// Deadline, Inputs, Tag and Done, calls Submit, and gets it back exactly once
// through Done (unless Submit returned an error, in which case Done is not called
// and the caller keeps the item). Between Submit and Done the dispatcher and the
// Sender own it and the caller must not touch it. Items are meant to be pooled by
// the caller (sync.Pool or a free list): the dispatcher never allocates one.
type Item struct {
	// Arrival is when the item reached the module; zero means "now" at Submit.
	Arrival time.Time
	// Deadline is when the item must be done; zero means Arrival + the module
	// budget (no deadline when the plan gives no budget).
	Deadline time.Time
	// Expiry is the latest time the item may still be handed to the Sender;
	// zero means Deadline. Deadline decides when a partial batch is flushed;
	// Expiry only when an item is given up. The gateway sets it past Deadline
	// when the request's end-to-end deadline leaves room: a module budget is the
	// planner's split of the SLO, and an item late on it can still meet the SLO.
	Expiry time.Time
	// DoneBy is when the item must be done for its request to make its own
	// deadline: the request's deadline less the shortest path of the DAG
	// after this module (and the slack). Admission (Options.Admission)
	// refuses an item predicted to finish later. Zero: Expiry + the batch's
	// duration when Expiry is set, else Deadline (Due).
	DoneBy time.Time
	// Abandoned, when not nil, says whether the request the item serves still
	// wants it: the caller sets it (from any goroutine, at any time) when its
	// client went away or its request failed elsewhere. An abandoned item is
	// never sent: it completes with ErrCancelled when Sweep takes it out of
	// the queues or when its batch is sent, whichever comes first; one whose
	// batch was already sent runs and its result is counted as dropped
	// (Stats.Cancelled, Stats.Dropped). One atomic load per item at send, none
	// at Submit.
	Abandoned *atomic.Bool
	// Class is the item's priority class, 0 (the highest) to Classes−1; out
	// of range counts as the lowest. With Options.Admission a lower class is
	// refused with more headroom left (ClassHeadroom), unless it is below its
	// floor (Options.ClassFloor); see docs/protocol.md, "Priority".
	Class int
	// Inputs are the item's tensors (one row each); read by the Sender.
	Inputs []api.Tensor
	// Home is the backend (its placement id, Slot.Backend) that holds the
	// item's inputs (Cloudflow's locality, docs/locality.md); "": none. With
	// Options.Locality a batch goes to a free machine of its group on the
	// home most of its items share, when one is free and as fast as planned.
	Home string
	// Tag is the caller's own context (a pointer keeps Submit allocation-free).
	Tag any
	// Done is called exactly once with the finished item, from the goroutine that
	// finished it: the Sender's (after a batch), a timer's (deadline passed while
	// queued) or Close's caller. It must not block for long.
	Done func(*Item)

	// Set by the dispatcher before Done.

	// Outputs are the item's output tensors as the Sender split them (nil in the
	// simulator).
	Outputs []api.Tensor
	// Err is nil on success; ErrDeadline when the expiry (by default the
	// deadline) passed before the item could be sent; ErrCancelled when it was
	// abandoned before it was sent; ErrClosed after Close; otherwise the
	// Sender's error.
	Err error
	// Sent is when the item's batch went to the Sender (zero if never sent);
	// Finished when the item was completed. Queue time is Sent−Arrival, compute
	// time Finished−Sent.
	Sent, Finished time.Time
	// Slot is the machine the item ran on (nil if never sent).
	Slot *Slot
}

// Batch is what the dispatcher hands to a Sender: the real items of one batch, in
// arrival order, plus the number of dummy items the Sender pads it with (dummies
// carry no payload and nothing of theirs is ever returned). The Sender reads Slot,
// Items and Dummies, runs the batch, and calls Done exactly once; after Done it must
// not touch the batch or its items.
type Batch struct {
	// Slot is the machine that runs the batch.
	Slot *Slot
	// Items are the real items, in arrival order (never empty when sent),
	// but for those priority classes swapped between queued batches
	// (promoteLocked).
	Items []*Item
	// Dummies is the number of dummy items in the batch (§III-D).
	Dummies int
	// Sent is when the dispatcher handed the batch to the Sender.
	Sent time.Time

	d       *Dispatcher
	g       *group
	m       *machine
	target  int
	minDL   time.Time // earliest deadline among Items (zero: none)
	expired []*Item   // items found past their expiry (or abandoned) at send time; Err set
	// Set when placed on a machine (its place on the device) and when sent
	// (when it is expected to end: the wait on its device, then the
	// machine's expected duration; and that wait).
	end   time.Time
	wait  time.Duration
	dev   deviceTicket
	onDev bool   // counted on b.m's device, not yet done or taken back
	link  *Batch // intrusive list of batches to act on after unlocking
}

// Size returns the number of items in the batch, dummies included.
func (b *Batch) Size() int { return len(b.Items) + b.Dummies }

// Wait returns how long the batch was expected, when sent, to queue on its
// backend behind the batches other dispatchers had sent there
// (Options.Devices; 0 without). A backend's slowness is its calls measured
// against Wait + Slot.Duration. The Sender may read it until it calls Done.
func (b *Batch) Wait() time.Duration { return b.wait }

// Done completes the batch: outputs[i] are the outputs of Items[i] (or nil: no
// outputs, as in the simulator), err the batch's error (applied to every item).
// It is called exactly once by the Sender, from any goroutine, possibly from within
// Send. It completes every item through its Done callback, frees the machine's lane
// and starts the machine's next queued batch.
func (b *Batch) Done(outputs [][]api.Tensor, err error) {
	d := b.d
	now := d.clock.Now()
	if err == nil && outputs != nil && len(outputs) != len(b.Items) {
		err = fmt.Errorf("module %q slot %s: sender returned outputs for %d items, batch has %d: %w",
			d.module, b.Slot, len(outputs), len(b.Items), ErrSender)
	}
	var dropped uint64
	for i, it := range b.Items {
		it.Err = err
		if err == nil && outputs != nil {
			it.Outputs = outputs[i]
		}
		it.Sent = b.Sent
		it.Finished = now
		it.Slot = b.Slot
		if it.abandoned() {
			dropped++ // ran for a request gone meanwhile: its caller drops the result
		}
	}
	n := uint64(len(b.Items))
	var out outList
	d.mu.Lock()
	d.stats.Dropped += dropped
	m := b.m
	m.busy--
	if m.lanes != nil {
		m.lanes.busy--
	}
	m.stats.Busy += now.Sub(b.Sent)
	// A batch that ran past its expected end may leave the lanes later than
	// counted, and raises the group's ratio: the open batches' deadline
	// flush is retimed then (retimeLocked), not after every batch.
	late := now.After(b.end)
	if b.onDev {
		m.dev.done(b.dev, now)
		b.onDev = false
	}
	if m.g.observe(now.Sub(b.Sent), b.end.Sub(b.Sent), now, len(b.Items)+b.Dummies >= m.slot.Batch) {
		d.armRelaxLocked()
	}
	m.finished(b)
	d.stats.Completed += n
	if err != nil {
		d.stats.Failed += n
	}
	for {
		p := m.next()
		if p == nil {
			break
		}
		nb := p.pending.peek()
		on := runOn(nb, m, p)
		if on == nil {
			break
		}
		p.pending.pop()
		d.promoteLocked(nb, p, now)
		nb.m, nb.Slot = on, &on.slot
		d.startLocked(nb, now, &out)
		if p != m { // a peer's queued batch: its estimates lose it
			if d.admit {
				p.resync(now)
			}
			if late {
				d.retimeLocked(p, now)
			}
		}
	}
	if d.admit {
		// Only under admission: resynced estimates also change which
		// machine a queued batch picks, and the paper's rule is kept as it was.
		m.resync(now)
	}
	if late {
		d.retimeLocked(m, now)
	}
	d.publishLocked(now)
	if d.early {
		d.idleFlushLocked(m, now, &out)
	}
	d.mu.Unlock()
	d.flush(&out)
	for _, it := range b.Items {
		it.Done(it)
	}
	d.mu.Lock()
	d.recycleLocked(b)
	d.mu.Unlock()
}

// batchFIFO is a ring of batches waiting for a free lane on one machine.
type batchFIFO struct {
	buf  []*Batch
	head int
	n    int
}

func (q *batchFIFO) len() int { return q.n }

func (q *batchFIFO) push(b *Batch) {
	if q.n == len(q.buf) {
		nb := make([]*Batch, 2*len(q.buf)+4)
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = b
	q.n++
}

func (q *batchFIFO) peek() *Batch { return q.buf[q.head] }

// at returns the k-th batch from the head (0: the head).
func (q *batchFIFO) at(k int) *Batch { return q.buf[(q.head+k)%len(q.buf)] }

func (q *batchFIFO) pop() *Batch {
	b := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return b
}

// ModuleTimes are a module's figures SetDeadlines derives an item's times
// from: its budget (0: none), a slack kept for the hop to the backend and
// back, its shortest batch duration, and Tail, the least time a request
// needs after the module (api.SessionPlan.ShortestRest of the module less
// Shortest). Fixed per plan.
type ModuleTimes struct {
	Budget, Slack, Shortest, Tail time.Duration
	// PathBudget, when set, turns on Llama's per-invocation slack (its
	// Algorithm 1; docs/dataplane.md, "Per-invocation slack"): Budget plus
	// the longest path of budgets after the module to a sink
	// (api.SessionPlan.BudgetRest). The flush deadline is then the module's
	// share of the time the request has left, Budget/PathBudget of it,
	// instead of Budget from now: an item whose upstream ran early gets the
	// time it saved, one that arrives late flushes sooner, in proportion.
	PathBudget time.Duration
}

// SetDeadlines sets it's Deadline, Expiry and DoneBy at a module of a DAG
// from the request's end-to-end deadline, the module's times, and reserve,
// the time the modules after it need as their queues are now
// (Stage.Reserve; 0 for the last module):
//
//	Deadline = min(now + Budget, request) − Slack          (times the flush)
//	         = now + (request − now) × Budget/PathBudget − Slack  (PathBudget set)
//	DoneBy   = request − max(Tail, reserve) − Slack        (admission's bound)
//	Expiry   = request − Tail − Shortest − Slack, when later than Deadline
//
// The module deadline times the flush; the item is given up only when the
// request can no longer make its own deadline with this module's and the
// longest downstream path's shortest durations still to run, so a queue
// that holds an item past its share of the SLO (a burst, a slow host) costs
// that request latency, not an error. Admission admits it while it would
// finish here in time for the rest of the DAG as its queues are now: a
// module that admitted an item so late that the next one must refuse it
// would waste its work (docs/dataplane.md, "Module deadlines"). The live
// gateway and the simulator both call it.
func (it *Item) SetDeadlines(now, request time.Time, t *ModuleTimes, reserve time.Duration) {
	it.Deadline, it.Expiry = request, time.Time{}
	switch {
	case t.PathBudget > 0 && !request.IsZero():
		if left := request.Sub(now); left > 0 && t.Budget < t.PathBudget {
			it.Deadline = now.Add(time.Duration(float64(left) * float64(t.Budget) / float64(t.PathBudget)))
		}
	case t.Budget > 0:
		if b := now.Add(t.Budget); b.Before(request) {
			it.Deadline = b
		}
	}
	it.Deadline = it.Deadline.Add(-t.Slack)
	it.DoneBy = request.Add(-max(t.Tail, reserve) - t.Slack)
	if exp := request.Add(-t.Tail - t.Shortest - t.Slack); exp.After(it.Deadline) {
		it.Expiry = exp
	}
}

// Due returns when it must be done for Options.Admission to admit it, were
// it to run in a batch of duration d: DoneBy when set; else Expiry + d when
// Expiry is set (Expiry is the latest time it may be sent), else Deadline;
// zero (no bound) when none is set.
func (it *Item) Due(d time.Duration) time.Time {
	if !it.DoneBy.IsZero() {
		return it.DoneBy
	}
	if !it.Expiry.IsZero() {
		return it.Expiry.Add(d)
	}
	return it.Deadline
}

// expired reports whether it may no longer be sent at now: past its Expiry,
// or past its Deadline when it has no Expiry.
func (it *Item) expired(now time.Time) bool {
	at := it.Expiry
	if at.IsZero() {
		at = it.Deadline
	}
	return !at.IsZero() && now.After(at)
}

// abandoned reports whether it's request no longer wants it.
func (it *Item) abandoned() bool { return it.Abandoned != nil && it.Abandoned.Load() }
