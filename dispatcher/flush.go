package dispatcher

import (
	"math"

	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Flush is a flush rule: when an open batch goes partial, before it is full
// and before its deadline flush (which every rule keeps as the backstop: a
// partial batch goes at the latest time that still meets its oldest item's
// deadline, §III-B).
//
// A rule that sends early (Early true) is asked, through NeededGap, each time
// a machine the open batch could go to is idle (a free lane, nothing queued):
// at Submit, when a lane frees (Batch.Done), and at the rechecks the
// dispatcher arms while the batch waits. The batch goes when the dispatcher's
// estimate of the arrival gap (Dispatcher.ArrivalGap, corrected for bursts and
// quiet spells; docs/dataplane.md, "Flush") is at least NeededGap; while it is
// not, the dispatcher rechecks at the time it would be, with no arrival.
//
// Lag, the gateway's estimate of an item's latency, assumes FlushIdle's guard
// (batches no smaller than keep the machines 80% busy) for every rule that
// sends early: a rule's NeededGap cannot be inverted in general.
//
// A Flush is an immutable value chosen by name from a registry (the --flush
// flag): FlushDeadline and FlushIdle are this package's (BuiltinFlushes);
// main, or a test, may offer more (BuiltinFlushes().With). NeededGap runs with
// the module's lock held, per request: it must not block or allocate.
type Flush interface {
	// Name is the name users choose the rule by, e.g. "idle" (--flush).
	Name() string
	// Early reports whether the rule ever sends a batch partial before its
	// deadline flush. Read once, at New: false leaves only full batches and
	// the deadline flush, and the dispatcher keeps no arrival-gap estimate.
	Early() bool
	// NeededGap returns the least estimated arrival gap, in seconds, at which
	// v's batch may go now, partial, to an idle machine: 0 always, +Inf
	// never.
	NeededGap(v FlushView) float64
}

// FlushView is an open batch as a Flush sees it, valid during the call.
type FlushView struct {
	d *Dispatcher
	q *queue
	b *Batch
}

// Size returns the batch's size so far: items and dummies.
func (v FlushView) Size() int { return v.b.Size() }

// Target returns the batch size of the group the batch is filled for.
func (v FlushView) Target() int { return v.b.target }

// GapFor returns the least arrival gap, in seconds, at which the module's
// machines would run at most util busy (util in (0, 1]) were every batch as
// small as this one (k items, or its group's batch size if smaller: the rule
// acts on every group).
//
// A shared stream (TC): groups take shares s_j of the batches (their planned
// batch rates), so the module sends 1/(gap·m) batches/s, m = Σ s_j·min(k, b_j),
// and group j's machines (occupancy n_j, duration d_j) are busy s_j·d_j/n_j of
// that: util·m·gap ≥ max_j s_j·d_j/n_j. A machine's own stream (RR): the
// machine takes its planned share s of the items in batches of k:
// util·k·n·gap ≥ s·d. Lanes beyond one per machine are not counted, which
// errs towards waiting.
func (v FlushView) GapFor(util float64) float64 {
	d, q, b := v.d, v.q, v.b
	k := b.Size()
	if q.m != nil {
		s, n := q.m.weight/d.st.sumMach, q.m.slot.Occupancy
		return s * b.g.duration.Seconds() / (util * float64(k) * n)
	}
	var m float64
	for _, g := range d.st.groups {
		m += g.share * float64(min(k, g.batch))
	}
	return d.st.maxLoad / (util * m)
}

var (
	// FlushDeadline (the default, the paper's §III-B) sends a partial batch only
	// at the latest time that still meets its oldest item's deadline. At low
	// load every item therefore takes nearly its module budget.
	FlushDeadline Flush = deadlineFlush{}
	// FlushIdle also sends a batch, partial, when a machine of its group has a
	// free lane and nothing queued, as long as batches that small would keep
	// every machine of the module at most 80% busy at the estimated arrival
	// rate. At the planned rate of a plan whose machines run near 80% busy only
	// full batches pass, as under FlushDeadline; below it, an item does not
	// wait for batch-mates that are not coming. The deadline flush stays as the
	// backstop (docs/dataplane.md, "Flush").
	FlushIdle Flush = idleFlush{}
)

type deadlineFlush struct{}

var _ Flush = deadlineFlush{}

func (deadlineFlush) Name() string                { return "deadline" }
func (deadlineFlush) String() string              { return "deadline" }
func (deadlineFlush) Early() bool                 { return false }
func (deadlineFlush) NeededGap(FlushView) float64 { return math.Inf(1) }

type idleFlush struct{}

var _ Flush = idleFlush{}

func (idleFlush) Name() string                  { return "idle" }
func (idleFlush) String() string                { return "idle" }
func (idleFlush) Early() bool                   { return true }
func (idleFlush) NeededGap(v FlushView) float64 { return v.GapFor(idleFlushUtilization) }

// idleFlushUtilization is the highest utilisation FlushIdle's partial batches
// may bring their machines to (were every batch that small).
const idleFlushUtilization = 0.8

// BuiltinFlushes returns a registry of this package's flush rules,
// FlushDeadline (the default) and FlushIdle.
func BuiltinFlushes() *registry.Registry[Flush] {
	return registry.Must(registry.New("flush mode", "flush modes", FlushDeadline, FlushIdle))
}

// Flushes lists the built-in flush rules' names, comma separated, for flag help.
var Flushes = BuiltinFlushes().String()

// ParseFlush returns the built-in flush rule called name
// (BuiltinFlushes().Lookup): the parser of the --flush flag.
func ParseFlush(name string) (Flush, error) { return BuiltinFlushes().Lookup(name) }
