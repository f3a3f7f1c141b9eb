// Package dispatcher batches one module's requests and dispatches the batches to the
// machines of the module's plan (paper §III-B). The live gateway and the simulator
// run the same code: the dispatcher owns no socket and no goroutine, it is driven by
// a Clock it is given (SystemClock live, a *VirtualClock in `piccolo simulate`) and
// hands batches to a Sender (the backend client live, virtual backends in the
// simulator).
//
// # Slots and groups
//
// A module's plan (api.ModulePlan) lists config groups in throughput-cost order.
// Each group of m machines has ceil(m) slots (machines; len(Backends) when the plan
// is placed); a fractional last machine gets its share of the group's rate. The
// machines of one group share one batch stream.
//
// # Policies
//
// A dispatch Policy routes: it decides which open batch (stream) an arrival
// joins and which config group a batch is filled for, through the Router it
// builds for each plan. Everything else below (flush, lanes, dummies, plan
// swap) is the dispatcher's and the same under every policy. TC and RR are the
// two this package defines; main builds the Registry users choose from by name
// (--dispatch tc|rr), with no init-time registration. Options.Policy nil is TC.
// A Router that is also a Peeker (it can say what Join and Open would return
// without moving on) lets Predict and admission look at the very group the
// next arrival joins; TC's and RR's are.
//
// # Flush rules
//
// When a partial batch goes is a Flush (flush.go), chosen by name the same
// way (--flush deadline|idle; BuiltinFlushes, ParseFlush). A rule says whether
// it sends early at all and, each time a machine the open batch could go to is
// idle, the least arrival gap at which the batch may go now; the dispatcher
// keeps the arrival-gap estimate, the rechecks and the deadline backstop.
//
// # Throughput-cost dispatch (TC, the default)
//
// This is the semantics the planner's latency model assumes:
//   - A module has ONE open batch at a time, filled from the module's single arrival
//     stream (requests and dummy arrivals).
//   - The group that will receive the open batch is chosen when the batch opens, by
//     smooth weighted round-robin over groups with weight = planned batch rate
//     (group rate / batch size, batches/s), ties to the better throughput-cost rank
//     (plan order). Each group's long-run share is thus its planned rate. The open
//     batch's target size is that group's batch size.
//   - A full batch goes to the group's next machine in rotation that has a free
//     lane (a machine has `concurrency` lanes); with none free, to the machine whose
//     lane frees first (estimated from the profiled duration), where it queues.
//   - Deadline-aware flush: each item has a module deadline (arrival + module
//     budget unless the caller sets one). The open batch is flushed early, partial,
//     at the latest time at which sending it still meets its earliest deadline given
//     the group's duration (deadline − duration), and not before.
//   - Flush (Options.Flush): FlushDeadline, the default, is the rule above.
//     FlushIdle also sends the open batch, partial, when a machine of its group
//     has a free lane and nothing queued (at Submit, and in Batch.Done when the
//     lane frees), but only while batches that small would keep every machine
//     of the module at most 80% busy at the estimated arrival rate
//     (worthFlushing has the formula). The gap it assumes (gapEstimate) is an
//     exponentially weighted gap (weight 0.1, each gap capped at 3 × the
//     estimate, so a quiet spell does not linger in it into the next burst)
//     starting from Options.ArrivalGap or the planned rate; for its first 20 arrivals a fresh dispatcher also
//     takes the arrivals measured since it was made (over at least one batch
//     duration), so a lone first request is not held for a planned load that
//     has not come; the gap of the last 4 arrivals caps it, so a burst's first
//     items do not take every idle machine as small batches; a third of the
//     quiet since the last arrival floors it. A batch the guard holds with a
//     machine idle is rechecked by its flush timer when, with no arrival, the
//     guard would pass; the recheck comes forward as the batch grows
//     (recomputed each time it doubles), so in a closed loop, whose clients
//     all come back to an idle machine, the batch goes about three times
//     its needed gap after the last of them. At the planned rate of a plan whose machines run near
//     80% busy only full batches pass, as under FlushDeadline; below it, items
//     do not wait for batch-mates that are not coming.
//   - An item whose expiry (Item.Expiry, by default its deadline) has already
//     passed when it is submitted is refused (Submit returns ErrDeadline); one
//     whose expiry passes before its batch is handed to the Sender completes with
//     ErrDeadline. Neither is ever sent; both are counted in Stats. The deadline
//     times the flush; the expiry, which the gateway derives from the request's
//     end-to-end deadline, decides when an item is given up.
//
// # Admission (Options.Admission, Predict)
//
// The dispatcher knows each machine's queue: the lanes' estimated free times
// (each running or queued batch counted for its profiled duration; under
// Admission recomputed from what is really running whenever a batch ends).
// Predict(now) is the least time an item submitted now takes: its batch goes
// to the group of the open batch it would join (TC: the group that batch was
// opened for; RR: its stream's machine), starts when the earliest lane of
// that group's machines frees (now if one is idle), or on a spare machine if
// that is earlier, and runs for the group's duration; the wait and the
// duration are scaled by the group's slowness, an upper envelope of measured
// over profiled batch durations (1 until a batch ends; while the group has an
// idle machine and no batch has measured it for a second, its excess over 1
// halves each second, group.relax, so a few stalled batches cannot lock
// admission for good). The rule, with
// Options.Admission, at Submit:
//
//	refuse with ErrOverloaded  ⇔  predicted completion > it.Due(d_g)
//
// on the group's machines and on every spare machine whose batch holds the
// open batch with it. Due is Expiry + d_g when the item has an Expiry (the
// latest time it may be sent), else its Deadline. Why this keeps its promise:
// the open batch is sent by its deadline flush, deadline − d_g, at the
// latest; if a lane is free by then the item completes by its deadline; if
// not, it starts when the predicted lane frees, because under TC and RR no
// other batch can take that lane first (one open batch a group, or a stream
// of its own a machine). So an admitted item is never failed late, and with
// durations as profiled (or as slow as measured) it completes by Due. The
// cost is O(1) per item: each group's earliest free lane is kept per batch,
// not per item. Items moved by a plan swap are not re-admitted. Without
// Admission the paper's rule is unchanged: an item that cannot be served in
// time is failed with ErrDeadline when its batch is sent.
//
// A machine's lanes are its own only when it is alone on its backend. With a
// DeviceTable (Options.Devices), a batch is counted on its backend's Device
// from when it is placed on a machine, sent or queued, so the prediction sees
// the batches of every machine and module placed there. Machines of one plan
// on one backend (a static pool shorter than the plan, or two groups packed
// together) are peers: together they send at most as many batches as the
// device has lanes, and a lane that frees sends the peers' queued batch that
// was counted first, on its own machine when that machine has a lane. Batches
// sent at once from several goroutines reach a backend in any order, so
// without this gate a batch counted to run first could run last and its
// admitted items end late (TestMachinesOnOneBackendShareItsLanes runs the
// backend in the worst order).
//
// With constant arrivals at the planned rates, a batch for group i collects b_i
// items from the whole module stream W, so its oldest item waits (b_i−1)/W ≤
// (b_i−1)/w_i before the batch is sent and d_i more to run: within Theorem 1's
// d_i + b_i/w_i (w_i = rate of group i and every later group).
//
// # Cancellation and priority classes (cancel.go)
//
// An item whose caller sets its Abandoned flag is never sent: Sweep takes
// the abandoned items out of the open batches and the machines' queues at
// once (O(queued items), called when a request is abandoned), and one left
// is dropped when its batch is sent (ErrCancelled; Stats.Cancelled). An item
// of a batch already sent runs; Batch.Done counts it in Stats.Dropped.
// Submit pays nothing for this.
//
// Item.Class (0 high … Classes−1 low) changes admission and order, never
// batching: with Admission, an item of class c is refused while its
// predicted completion takes more than ClassHeadroom[c] of its time left,
// unless its class's share of the items admitted lately is below
// Options.ClassFloor (then it is judged as class 0); and a queued batch
// about to start takes the higher-class items of the batches queued behind
// it on its machine (promoteLocked), never moving an item back past its due.
//
// # Spare machines (SetSpare)
//
// Machines of the pool that the plan leaves idle, each with the module's
// profile on its hardware, may be given as spare (Slot.Group −1). A closed
// batch goes to a spare machine instead of its group's when every machine of
// the group is busy and the batch would complete after its earliest item is
// due there, but in time on the spare (the one that completes it first).
// Admission counts the spare machines; Stats.Overflow counts the batches
// sent to them and Stats.Spare their work. Spare machines survive a plan
// swap; SetSpare replaces them.
//
// With Options.LateCommit (Llama's late commit, per batch), such a batch
// first goes to an idle machine of another of the module's planned groups
// that completes it in time, the cheapest machine time first, unless it
// would still run there when a batch open for that group must start
// (lateCommitFor); Stats.LateCommitted counts them. The group a batch opens
// for stays the plan's share.
//
// # Dummies (§III-D)
//
// The dispatcher injects dummy arrivals at the module's planned dummy rate,
// constant spacing, into the open batch. They count toward filling a batch but are
// not items: a Batch carries only their number (Batch.Dummies) and the Sender pads
// with them. Nothing of a dummy is ever returned to a client. A batch with no real
// item is not sent (its dummies are counted as dropped).
//
// # Round-robin (RR, the baseline)
//
// Per item, smooth weighted round-robin over machines (weight = the machine's
// planned rate); each machine batches its own items to its batch size with the same
// deadline-aware flush. This is the dispatch of Nexus, InferLine and Clipper, whose
// worst case the paper puts at 2d (Fig. 3, bottom).
//
// # Plan swap
//
// SetPlan replaces the slots atomically with respect to Submit: items in open
// batches and machine queues are re-submitted to the new slots in arrival order;
// batches already sent finish on their old slots. Nothing is lost.
//
// When the new plan is another dispatcher (the live gateway builds one per
// module for each plan, beside the old), Handover(to) does the same across the
// two: d's unsent items (open batches, batches queued on its machines) are
// re-submitted to to in arrival order, by the same code as SetPlan's, keeping
// their Done, deadlines and expiries, not admitted again but counted in to's
// queues, so that to's admission sees the work it inherits; batches d has
// sent finish on d. It takes d's lock, then to's, never both. What neither
// sees is the other's batches already running on a backend they share.
//
// # Backend health
//
// Options.Health, when set, gives each placed machine's backend a
// MachineHealth (health.go) that the data plane sets: a machine whose backend
// is down is never handed a batch while another machine that is up can take
// its size (its own group first, an idle one first), Reroute moves the batches
// queued on it, and Alternate picks a machine for a retried or hedged call. A
// straggler's lanes are estimated to free its slowness times later, and its
// batch goes to an idle machine of its group that is not slow. Its pace
// (MachineHealth.SetPace: compute time over the offline profile, set by the
// data plane from its latest batches; as a ratio to the planned duration
// through Options.Profiled) scales the machine's expected duration the same
// way. One function (Dispatcher.target: group.choose, then health's
// reroute, then the spare step) says which machine a batch goes to and when
// it ends there (its lane free, then that duration): a free machine that
// runs it as planned at once, else the free one that ends it first unless
// it would end the batch after its oldest deadline while a busy one ends
// it sooner. Dispatch sends the batch to that machine, Predict and
// admission assume it, and the deadline flush times the batch by it
// (queue.sendBy: the oldest deadline less that machine's duration by its
// pace or straggler slowness, times the group's measured ratio, brought
// sooner when a batch of the group is placed or ends late, never later).
// All are read with atomic loads under the lock, at dispatch and in Predict.
//
// # Concurrency and allocation
//
// Submit, Predict, SetPlan, SetSpare, Stats, Slots and Close may be called from any goroutine. One
// mutex per module dispatcher guards its queues; it is never held while calling the
// Sender or an item's Done. Sender.Send is called from whichever goroutine made a
// batch ready: a Submit caller, a timer (deadline flush, dummy arrival) or a
// Batch.Done caller. Batch.Done is called by the Sender, once, from any goroutine;
// it frees the lane, starts the machine's next queued batch and completes the
// items through their Done callbacks on that goroutine.
//
// Items are owned by the caller and pooled by it; batches are pooled by the
// dispatcher; timers are created once and re-armed (Timer.Reset). In steady state
// Submit and Batch.Done allocate nothing (see BenchmarkSubmit).
//
// Slots are immutable; a Batch and its items belong to the Sender from Send until
// it calls Done.
package dispatcher
