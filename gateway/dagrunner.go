package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Timing is what a runner measured for one item of one module.
type Timing struct {
	Queue   time.Duration // from submission until its batch started on a backend
	Compute time.Duration // the batch's run on the backend, network included
}

// ModuleRunner runs items of modules: in the live gateway a dispatcher per module
// that batches items and sends them to backends (package dataplane; docs/architecture.md).
type ModuleRunner interface {
	// Run submits inputs as one item of module of session and returns at once. It
	// calls done exactly once, from any goroutine, possibly before Run returns, with
	// the item's outputs (owned by the callee from then on) or an error wrapping one
	// of this package's sentinels (ErrUnavailable, ErrBackend, ErrDeadline,
	// ErrOverloaded, ErrBadInput, ErrCancelled) where one applies. call is the
	// request's (its deadline, class and abandonment; the runner may keep the
	// pointer until done); ctx is cancelled when the request is abandoned, after
	// which done may still be called and its result is ignored.
	Run(ctx context.Context, session, module string, inputs []api.Tensor, call *Call,
		done func(outputs []api.Tensor, t Timing, err error))
	// Estimate returns how long an item of module submitted now would take to
	// finish: the current queue wait plus the batch duration; 0 when unknown.
	// Called on every request: it must be cheap and lock-free.
	Estimate(session, module string) time.Duration
}

// Call is what each item of one request tells the runner: the request's
// end-to-end deadline, its priority class, and whether it is still wanted.
// The DAGRunner makes one per request, in the request's own run state (no
// allocation of its own); Deadline and Class are fixed before the first Run,
// Abandoned is set once, from any goroutine, when the request returns
// without its result (its client went away, its deadline passed, a module
// failed): from then on the runner need not run its items.
type Call struct {
	Deadline  time.Time
	Class     int // PriorityClass of the request's priority: 0 high, 1 normal, 2 low
	Abandoned atomic.Bool
}

// Abandoner is a ModuleRunner that can take the items of abandoned requests
// (Call.Abandoned) out of a module's queues at once, rather than when their
// batch would be sent. The DAGRunner calls Abandon for each module a request
// still had running when it returned without its result: off the path of a
// request that completes.
type Abandoner interface {
	Abandon(session, module string)
}

// FanOutObserver is a ModuleRunner told how many items each fan-out made:
// module of session got items items (0: it was skipped) from one item of
// its parent. Operators read the distribution from it and write it into the
// session's config (api.Module.FanOut). The DAGRunner calls FannedOut once a
// fan-out, on the request's goroutine: it must be cheap, lock-free and must
// not allocate.
type FanOutObserver interface {
	FannedOut(session, module string, items int)
}

// Priority classes (Call.Class): what Triton's `priority` request parameter
// maps to (PriorityClass; docs/protocol.md, "Priority").
const (
	ClassHigh   = 0
	ClassNormal = 1
	ClassLow    = 2
)

// PriorityClass maps Triton's `priority` request parameter onto a class: 1
// (the highest) is ClassHigh, 0 (the default) and 2 ClassNormal, 3 and above
// ClassLow. A negative priority is ErrBadInput.
func PriorityClass(priority int64) (int, error) {
	switch {
	case priority < 0:
		return 0, BadInput("parameter \"priority\" is %d; allowed: 0 (the default), 1 (the highest), 2, 3 or more (the lowest class)", priority)
	case priority == 1:
		return ClassHigh, nil
	case priority == 0 || priority == 2:
		return ClassNormal, nil
	}
	return ClassLow, nil
}

// DefaultTimeout is the deadline of a request to a session without an SLO.
const DefaultTimeout = 30 * time.Second

// DAGRunner runs sessions' DAGs over a ModuleRunner. It is safe for concurrent use;
// SetSessions swaps the session table atomically and requests already running
// finish on the table they started with.
type DAGRunner struct {
	runner   ModuleRunner
	meta     MetadataSource        // runner's, when it knows its modules' tensors
	fanOut   FanOutObserver        // runner's, when it is told of fan-outs
	arrivals ArrivalObserver       // nil: none; set before the first Infer
	modArr   ModuleArrivalObserver // arrivals', when it counts every module
	table    atomic.Pointer[sessionTable]
}

// ArrivalObserver is told of each request to a known session whose inputs
// passed the checks, before admission: the demand, refused requests
// included. The control plane counts arrivals with it for its rate monitor.
// Arrived runs on the request's goroutine: it must be cheap, lock-free and
// must not allocate.
type ArrivalObserver interface {
	Arrived(session string)
}

// ModuleArrivalObserver is an ArrivalObserver also told of the items that
// reach each module with parents (Llama's input-dependent flow: branches
// taken with their measured probabilities, fan-outs with their measured
// items): ModuleArrived(session, module, items) once each time module starts,
// items 1, or for a fan-out module the items its parent's item made (0 when
// it made none: the module is skipped). A module a branch did not choose is
// not told (it gets 0 items). Sources are not told: Arrived counts them.
// Refused(session) is told of each request Arrived counted that admission
// then refused (ErrOverloaded), before any module ran: under overload the
// modules after the sources see only the admitted requests' items, and the
// control plane scales them back to the demand by it.
// Called on the request's goroutine or a runner's (a module starts where its
// last parent resolved): it must be cheap, lock-free and must not allocate.
type ModuleArrivalObserver interface {
	ArrivalObserver
	ModuleArrived(session, module string, items int)
	Refused(session string)
}

// ObserveArrivals makes o the DAGRunner's arrival observer (and its
// module arrival observer, when o is a ModuleArrivalObserver). Call it
// before the first Infer (it is not synchronised with requests).
func (e *DAGRunner) ObserveArrivals(o ArrivalObserver) {
	e.arrivals = o
	e.modArr, _ = o.(ModuleArrivalObserver)
}

type sessionTable struct {
	byName map[string]*dag
	names  string // sorted, comma separated, for errors
}

// NewDAGRunner returns a runner of sessions over runner, or an error naming the
// first session that is not a valid DAG.
func NewDAGRunner(runner ModuleRunner, sessions []api.Session) (*DAGRunner, error) {
	if runner == nil {
		return nil, errors.New("gateway: NewDAGRunner needs a ModuleRunner")
	}
	e := &DAGRunner{runner: runner}
	e.meta, _ = runner.(MetadataSource)
	e.fanOut, _ = runner.(FanOutObserver)
	if err := e.SetSessions(sessions); err != nil {
		return nil, err
	}
	return e, nil
}

// SetSessions replaces the sessions the DAGRunner serves.
func (e *DAGRunner) SetSessions(sessions []api.Session) error {
	t := &sessionTable{byName: make(map[string]*dag, len(sessions))}
	names := make([]string, 0, len(sessions))
	for _, s := range sessions {
		d, err := compile(s)
		if err != nil {
			return err
		}
		if _, dup := t.byName[s.Name]; dup {
			return fmt.Errorf("%s: session %q is listed twice", s.Source, s.Name)
		}
		t.byName[s.Name] = d
		names = append(names, s.Name)
	}
	sort.Strings(names)
	t.names = strings.Join(names, ", ")
	e.table.Store(t)
	return nil
}

// Session returns the session called name as the DAGRunner serves it.
func (e *DAGRunner) Session(name string) (api.Session, bool) {
	d, ok := e.table.Load().byName[name]
	if !ok {
		return api.Session{}, false
	}
	return d.session, true
}

// Sessions returns the names of the sessions served, sorted.
func (e *DAGRunner) Sessions() []string {
	t := e.table.Load()
	out := make([]string, 0, len(t.byName))
	for n := range t.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (e *DAGRunner) lookup(session string) (*dag, error) {
	t := e.table.Load()
	if d, ok := t.byName[session]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%w %q; known sessions: %s", ErrUnknownSession, session, t.names)
}

// Infer runs req through session's DAG and fills resp. The deadline is arrival +
// the session's SLO, or ctx's deadline or arrival + req.Timeout if earlier.
// req.Priority gives the items' class (PriorityClass). When Infer returns
// without the response (ctx cancelled, the deadline passed, a module failed)
// the request's items still queued are abandoned (Call.Abandoned, Abandoner). A request whose deadline cannot
// be met given the runner's estimates is rejected at once with ErrOverloaded
// (admission control); one still running at its deadline fails with ErrDeadline.
// resp.Parameters get "piccolo.<module>.queue_ms", ".compute_ms" and ".total_ms" for
// every module that ran (for a fan-out module, the slowest item's queue and compute)
// and "piccolo.e2e_ms". Infer blocks the calling goroutine until then.
func (e *DAGRunner) Infer(ctx context.Context, session string, req *InferRequest, resp *InferResponse) error {
	arrival := time.Now()
	d, err := e.lookup(session)
	if err != nil {
		return err
	}
	if len(req.Inputs) == 0 {
		return BadInput("session %q: the request has no inputs", session)
	}
	if err := e.checkInputs(d, req.Inputs); err != nil {
		return err
	}
	class, err := PriorityClass(req.Priority)
	if err != nil {
		return err
	}
	if req.Timeout < 0 {
		return BadInput("session %q: timeout %v is negative", session, req.Timeout)
	}
	if e.arrivals != nil {
		e.arrivals.Arrived(session)
	}
	timeout := d.slo
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	deadline := arrival.Add(timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline = cd
	}
	if est := d.estimate(e.runner); est > 0 && arrival.Add(est).After(deadline) {
		if e.modArr != nil {
			e.modArr.Refused(session)
		}
		return fmt.Errorf("%w: session %q: the current queue needs about %.1f ms, the deadline is in %.1f ms",
			ErrOverloaded, session, ms(est), ms(deadline.Sub(arrival)))
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	r := &run{e: e, d: d, ctx: ctx, inputs: req.Inputs,
		mods: make([]modRun, len(d.mods)), signal: make(chan struct{}, 1)}
	r.call.Deadline, r.call.Class = deadline, class
	if d.lanes > 0 { // anyof: each racing branch is abandoned on its own
		r.anyof = &raceRun{lanes: make([]Call, d.lanes), joins: make([]joinRun, d.joins)}
		for i := range r.anyof.lanes {
			r.anyof.lanes[i].Deadline, r.anyof.lanes[i].Class = deadline, class
		}
	}
	r.left.Store(int32(len(d.mods)))
	for i := range d.mods {
		r.mods[i].pending.Store(int32(len(d.mods[i].parents)))
	}
	for _, s := range d.sources {
		r.mods[s].chosen.Store(true)
		r.start(s)
	}
	select {
	case <-r.signal:
	case <-ctx.Done():
	}
	eb := r.err.Load()
	if eb == nil && r.left.Load() == 0 {
		return r.respond(req, resp, arrival)
	}
	r.abandon()
	// The deadline passed, or a module failed; a module that failed because the
	// request's context ended is reported as the deadline it is.
	if ctxErr := ctx.Err(); ctxErr != nil && (eb == nil || errors.Is(eb.err, context.DeadlineExceeded) ||
		errors.Is(eb.err, ErrDeadline) || errors.Is(eb.err, context.Canceled)) {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return fmt.Errorf("%w: session %q: no response within %.1f ms; still running: %s",
				ErrDeadline, session, ms(deadline.Sub(arrival)), r.running())
		}
		return fmt.Errorf("session %q: %w", session, ctxErr)
	}
	if e.modArr != nil && errors.Is(eb.err, ErrOverloaded) {
		e.modArr.Refused(session) // a module's admission (a source's, nearly always)
	}
	return eb.err
}

// checkInputs checks the request's inputs against what the source modules'
// models declare (MetadataSource), so that a request the backend would refuse is
// refused before it takes a place in a batch: a declared input must have the
// declared datatype, rank and fixed dimensions after dimension 0.
func (e *DAGRunner) checkInputs(d *dag, inputs []api.Tensor) error {
	if e.meta == nil {
		return nil
	}
	for _, m := range d.sources {
		decl, _, ok := e.meta.ModuleMetadata(d.name, d.mods[m].name)
		if !ok {
			continue
		}
		for i := range inputs {
			t := &inputs[i]
			for _, spec := range decl {
				if spec.Name != t.Name {
					continue
				}
				if spec.Datatype != t.Datatype {
					return BadInput("session %q: input %q is %s; module %q wants %s", d.name, t.Name, t.Datatype, d.mods[m].name, spec.Datatype)
				}
				fits := len(spec.Shape) == len(t.Shape)
				for k := 1; fits && k < len(spec.Shape); k++ {
					fits = spec.Shape[k] < 0 || spec.Shape[k] == t.Shape[k]
				}
				if !fits {
					return BadInput("session %q: input %q has shape %v; module %q wants %v (-1: any; dimension 0 is the batch)",
						d.name, t.Name, t.Shape, d.mods[m].name, spec.Shape)
				}
			}
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Module states of one run, for diagnostics.
const (
	stWaiting int32 = iota
	stRunning
	stDone
	stSkipped
	stCut // a racing branch that lost (anyof): its result is dropped
)

// run is the state of one request through a dag. Modules resolve (done or skipped)
// on runner goroutines; every hand-over between them goes through the atomics, so
// a module's outputs are written before its children's pending count drops and
// read after it reaches zero.
type run struct {
	e      *DAGRunner
	d      *dag
	ctx    context.Context
	call   Call     // the request's deadline, class and abandonment, for every Run
	anyof  *raceRun // anyof modules' state; nil for a session without one
	inputs []api.Tensor
	mods   []modRun
	left   atomic.Int32 // modules not yet resolved
	err    atomic.Pointer[errBox]
	signal chan struct{} // one send: all resolved, or the first failure
}

type errBox struct{ err error }

// raceRun is a request's state of its anyof modules: a Call per racing
// branch (dag.lanes), whose abandonment is the branch's own, and each anyof
// module's race (dag.joins).
type raceRun struct {
	lanes []Call
	joins []joinRun
}

// joinRun is the race state of one anyof module in one request.
type joinRun struct {
	won  atomic.Bool            // a parent has finished first (or all were skipped)
	from int                    // the parent that won, set before the module starts
	lost atomic.Pointer[errBox] // the first error of a parent's branch that failed
}

type modRun struct {
	pending atomic.Int32 // parents not yet resolved
	chosen  atomic.Bool  // a parent that ran chose this module
	state   atomic.Int32
	outputs []api.Tensor
	start   time.Time
	timing  Timing
	total   time.Duration
	// fan-out
	items     [][]api.Tensor
	itemTimes []Timing
	itemsLeft atomic.Int32
}

func (r *run) fail(err error) {
	if r.err.CompareAndSwap(nil, &errBox{err}) {
		r.wake()
	}
}

func (r *run) failed() bool { return r.err.Load() != nil }

// abandon marks the request's items unwanted and, when the runner can, has
// the modules still running take them out of their queues now. Children not
// yet started never start: start sees the failure or, for a request that
// ended on its context, finds ctx done.
func (r *run) abandon() {
	r.call.Abandoned.Store(true)
	if r.anyof != nil {
		for i := range r.anyof.lanes {
			r.anyof.lanes[i].Abandoned.Store(true)
		}
	}
	ab, ok := r.e.runner.(Abandoner)
	if !ok {
		return
	}
	for i := range r.mods {
		if r.mods[i].state.Load() == stRunning {
			ab.Abandon(r.d.name, r.d.mods[i].name)
		}
	}
}

func (r *run) wake() {
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *run) running() string {
	var names []string
	for i := range r.mods {
		if r.mods[i].state.Load() == stRunning {
			names = append(names, r.d.mods[i].name)
		}
	}
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// start runs module m once all its parents have resolved.
func (r *run) start(m int) {
	if r.failed() {
		return
	}
	mr := &r.mods[m]
	if !mr.chosen.Load() {
		r.resolve(m, true)
		return
	}
	n := &r.d.mods[m]
	if n.lane >= 0 && !mr.state.CompareAndSwap(stWaiting, stRunning) {
		return // its branch lost the race before it started
	}
	inputs := r.inputsOf(m)
	mr.start = time.Now()
	if n.lane < 0 {
		mr.state.Store(stRunning)
	}
	if n.fanout {
		r.startFanout(m, inputs)
		return
	}
	if r.e.modArr != nil && len(n.parents) > 0 {
		r.e.modArr.ModuleArrived(r.d.name, n.name, 1)
	}
	r.runModule(m, inputs, func(out []api.Tensor, t Timing, err error) {
		r.finished(m, out, t, err)
	})
}

// runModule calls the runner's Run for one item of module. A panic in it, or
// in a done it calls on this goroutine (a child module started from there),
// fails the request with ErrInternal (api.Recovered) instead of ending the
// process and every request in flight with it.
func (r *run) runModule(m int, inputs []api.Tensor, done func([]api.Tensor, Timing, error)) {
	defer func() {
		if v := recover(); v != nil {
			r.fail(api.Recovered("module", v))
		}
	}()
	n := &r.d.mods[m]
	call := &r.call
	if n.lane >= 0 {
		call = &r.anyof.lanes[n.lane]
	}
	r.e.runner.Run(r.ctx, r.d.name, n.name, inputs, call, done)
}

// inputsOf returns module m's inputs: the request's for a source, else the outputs
// of the parents that ran, in `after` order. A name two parents both output is
// kept as is from the first and renamed "<parent>.<name>" from the later ones.
func (r *run) inputsOf(m int) []api.Tensor {
	n := &r.d.mods[m]
	if len(n.parents) == 0 {
		return r.inputs
	}
	if n.anyOf { // the winner's outputs; it feeds this module alone
		return r.mods[r.anyof.joins[n.join].from].outputs
	}
	ran := 0
	last := -1
	for _, p := range n.parents {
		if r.mods[p].state.Load() == stDone {
			ran++
			last = p
		}
	}
	if ran == 1 {
		out := r.mods[last].outputs
		if len(r.d.mods[last].children) > 1 { // siblings get their own slice
			out = append([]api.Tensor(nil), out...)
		}
		return out
	}
	var in []api.Tensor
	for _, p := range n.parents {
		if r.mods[p].state.Load() != stDone {
			continue
		}
		for _, t := range r.mods[p].outputs {
			for i := range in {
				if in[i].Name == t.Name {
					t.Name = r.d.mods[p].name + "." + t.Name
					break
				}
			}
			in = append(in, t)
		}
	}
	return in
}

func (r *run) finished(m int, out []api.Tensor, t Timing, err error) {
	if r.failed() || r.lost(m) {
		return
	}
	name := r.d.mods[m].name
	if err != nil {
		r.failModule(m, fmt.Errorf("module %q: %w", name, err))
		return
	}
	if err := validateOutputs(out); err != nil {
		r.failModule(m, WrapBackend(fmt.Sprintf("module %q", name), err))
		return
	}
	mr := &r.mods[m]
	mr.outputs, mr.timing, mr.total = out, t, time.Since(mr.start)
	r.resolve(m, false)
}

func validateOutputs(out []api.Tensor) error {
	for i := range out {
		if err := out[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// resolve marks m done (or skipped) and starts every child whose parents have all
// resolved.
func (r *run) resolve(m int, skipped bool) {
	mr := &r.mods[m]
	n := &r.d.mods[m]
	if n.lane >= 0 && !r.settle(m, skipped) {
		return // its branch lost the race: cut already counted it
	}
	chosen := ^uint64(0)
	if !skipped && len(n.children) > 0 {
		var err error
		if chosen, mr.outputs, err = r.branch(m, mr.outputs); err != nil {
			r.fail(WrapBackend(fmt.Sprintf("module %q", n.name), err))
			return
		}
	}
	if skipped {
		mr.state.Store(stSkipped)
	} else {
		mr.state.Store(stDone)
	}
	for i, c := range n.children {
		cr := &r.mods[c]
		if r.d.mods[c].anyOf {
			r.race(c, m, !skipped && chosen&(1<<i) != 0)
			continue
		}
		if !skipped && chosen&(1<<i) != 0 {
			cr.chosen.Store(true)
		}
		if cr.pending.Add(-1) == 0 {
			r.start(c)
		}
	}
	if r.left.Add(-1) == 0 {
		r.wake()
	}
}

// race hands anyof module c the resolution of its parent p: the first parent
// that ran and chose c wins, c starts on its outputs and the other parents'
// branches are cut; when every parent was skipped, c is skipped.
func (r *run) race(c, p int, ran bool) {
	cr, jr := &r.mods[c], &r.anyof.joins[r.d.mods[c].join]
	if ran && jr.won.CompareAndSwap(false, true) {
		jr.from = p
		cr.chosen.Store(true)
		r.cut(c, p)
		cr.pending.Add(-1)
		r.start(c)
		return
	}
	if cr.pending.Add(-1) == 0 && jr.won.CompareAndSwap(false, true) {
		if eb := jr.lost.Load(); eb != nil {
			r.fail(eb.err) // no branch won: one failed, the others failed or were skipped
			return
		}
		r.start(c) // not chosen: skipped
	}
}

// failModule fails the request with err, unless module m is on a racing
// branch: then only its branch is out of the race (cut, its items
// abandoned), and the request fails only when no branch into the anyof
// module is left to win (Cloudflow's anyof: the first to finish).
func (r *run) failModule(m int, err error) {
	lane := r.d.mods[m].lane
	if lane < 0 {
		r.fail(err)
		return
	}
	if !r.mods[m].state.CompareAndSwap(stRunning, stCut) {
		return // cut already: another branch won
	}
	if r.left.Add(-1) == 0 {
		r.wake()
	}
	j, top := r.d.laneJoin[lane], r.d.laneTop[lane]
	for k, p := range r.d.mods[j].parents {
		if p == top {
			r.cutLane(j, k) // the modules after m on the branch never run
		}
	}
	r.anyof.lanes[lane].Abandoned.Store(true)
	r.anyof.joins[r.d.mods[j].join].lost.CompareAndSwap(nil, &errBox{err})
	r.race(j, top, false)
}

// cut drops the branches of anyof module c's parents other than winner: each
// of their modules not yet resolved is resolved as cut, its lane's items are
// abandoned, and a runner that can takes those still queued out at once.
func (r *run) cut(c, winner int) {
	n := &r.d.mods[c]
	for k, p := range n.parents {
		if p == winner {
			continue
		}
		lane := r.d.mods[p].lane
		running := r.cutLane(c, k)
		r.anyof.lanes[lane].Abandoned.Store(true)
		if ab, ok := r.e.runner.(Abandoner); ok && running {
			for _, x := range n.raced[k] {
				ab.Abandon(r.d.name, r.d.mods[x].name)
			}
		}
	}
}

// cutLane resolves as cut every module of anyof module c's parent k's
// branch not yet resolved, and reports whether one of them was running.
func (r *run) cutLane(c, k int) (running bool) {
	for _, x := range r.d.mods[c].raced[k] {
		xr := &r.mods[x]
		for {
			st := xr.state.Load()
			if st != stWaiting && st != stRunning {
				break
			}
			if xr.state.CompareAndSwap(st, stCut) {
				running = running || st == stRunning
				if r.left.Add(-1) == 0 {
					r.wake()
				}
				break
			}
		}
	}
	return running
}

// settle moves module m of a racing branch from waiting or running to done
// (or skipped); false when the branch was cut first.
func (r *run) settle(m int, skipped bool) bool {
	to := stDone
	if skipped {
		to = stSkipped
	}
	xr := &r.mods[m]
	for {
		st := xr.state.Load()
		if st != stWaiting && st != stRunning {
			return false
		}
		if xr.state.CompareAndSwap(st, to) {
			return true
		}
	}
}

// lost reports whether module m is on a racing branch that was cut: its
// results and errors (ErrCancelled from the abandonment among them) are
// dropped.
func (r *run) lost(m int) bool {
	return r.d.mods[m].lane >= 0 && r.mods[m].state.Load() == stCut
}

// branch reads module m's BranchOutput, if any, and returns the chosen children as
// a bit set over n.children and the outputs without the branch tensor.
func (r *run) branch(m int, outs []api.Tensor) (uint64, []api.Tensor, error) {
	bi := -1
	for i := range outs {
		if outs[i].Name == BranchOutput {
			bi = i
			break
		}
	}
	if bi < 0 {
		return ^uint64(0), outs, nil
	}
	n := &r.d.mods[m]
	b := outs[bi]
	rest := make([]api.Tensor, 0, len(outs)-1)
	rest = append(append(rest, outs[:bi]...), outs[bi+1:]...)
	children := func() string {
		s := make([]string, len(n.children))
		for i, c := range n.children {
			s[i] = fmt.Sprintf("%d=%s", i, r.d.mods[c].name)
		}
		return strings.Join(s, ", ")
	}
	var set uint64
	pick := func(i int64) error {
		if i < 0 || i >= int64(len(n.children)) {
			return fmt.Errorf("output %q chose child %d; its children are %s", BranchOutput, i, children())
		}
		set |= 1 << i
		return nil
	}
	switch b.Datatype {
	case "INT32":
		for off := 0; off+4 <= len(b.Data); off += 4 {
			if err := pick(int64(int32(binary.LittleEndian.Uint32(b.Data[off:])))); err != nil {
				return 0, nil, err
			}
		}
	case "INT64":
		for off := 0; off+8 <= len(b.Data); off += 8 {
			if err := pick(int64(binary.LittleEndian.Uint64(b.Data[off:]))); err != nil {
				return 0, nil, err
			}
		}
	case "BYTES":
		for off := 0; off+4 <= len(b.Data); {
			l := int(binary.LittleEndian.Uint32(b.Data[off:]))
			name := b.Data[off+4 : off+4+l]
			off += 4 + l
			found := false
			for i, c := range n.children {
				if r.d.mods[c].name == string(name) {
					set |= 1 << i
					found = true
				}
			}
			if !found {
				return 0, nil, fmt.Errorf("output %q chose %q, which is not a child; its children are %s", BranchOutput, name, children())
			}
		}
	default:
		return 0, nil, fmt.Errorf("output %q has datatype %s; want INT32, INT64 (child indexes) or BYTES (child names)", BranchOutput, b.Datatype)
	}
	return set, rest, nil
}

// startFanout splits the single parent's outputs on dimension 0 and runs one item
// per element; the results are joined back on dimension 0 in order.
func (r *run) startFanout(m int, inputs []api.Tensor) {
	n := &r.d.mods[m]
	items, err := splitDim0(inputs)
	if err != nil {
		r.fail(WrapBackend(fmt.Sprintf("module %q fans out the outputs of %q", n.name, r.d.mods[n.parents[0]].name), err))
		return
	}
	if r.e.fanOut != nil {
		r.e.fanOut.FannedOut(r.d.name, n.name, len(items))
	}
	if r.e.modArr != nil {
		r.e.modArr.ModuleArrived(r.d.name, n.name, len(items))
	}
	mr := &r.mods[m]
	if len(items) == 0 {
		r.resolve(m, true) // no elements: nothing to run, the module is skipped
		return
	}
	mr.items = make([][]api.Tensor, len(items))
	mr.itemTimes = make([]Timing, len(items))
	mr.itemsLeft.Store(int32(len(items)))
	for i := range items {
		r.runModule(m, items[i], func(out []api.Tensor, t Timing, err error) {
			r.itemDone(m, i, out, t, err)
		})
	}
}

func (r *run) itemDone(m, i int, out []api.Tensor, t Timing, err error) {
	if r.failed() || r.lost(m) {
		return
	}
	name := r.d.mods[m].name
	if err != nil {
		r.failModule(m, fmt.Errorf("module %q item %d: %w", name, i, err))
		return
	}
	if err := validateOutputs(out); err != nil {
		r.failModule(m, WrapBackend(fmt.Sprintf("module %q item %d", name, i), err))
		return
	}
	mr := &r.mods[m]
	mr.items[i], mr.itemTimes[i] = out, t
	if mr.itemsLeft.Add(-1) != 0 {
		return
	}
	joined, err := joinDim0(mr.items)
	if err != nil {
		r.fail(WrapBackend(fmt.Sprintf("module %q", name), err))
		return
	}
	for _, it := range mr.itemTimes {
		mr.timing.Queue = max(mr.timing.Queue, it.Queue)
		mr.timing.Compute = max(mr.timing.Compute, it.Compute)
	}
	mr.outputs, mr.total = joined, time.Since(mr.start)
	r.resolve(m, false)
}

// respond fills resp from the sinks that ran.
func (r *run) respond(req *InferRequest, resp *InferResponse, arrival time.Time) error {
	d := r.d
	var outs []api.Tensor
	for _, s := range d.sinks {
		if r.mods[s].state.Load() != stDone {
			continue
		}
		for _, t := range r.mods[s].outputs {
			for i := range outs {
				if outs[i].Name == t.Name {
					t.Name = d.mods[s].name + "." + t.Name
					break
				}
			}
			outs = append(outs, t)
		}
	}
	if len(req.Outputs) > 0 {
		sel := make([]api.Tensor, 0, len(req.Outputs))
		for _, want := range req.Outputs {
			found := false
			for _, t := range outs {
				if t.Name == want {
					sel = append(sel, t)
					found = true
					break
				}
			}
			if !found {
				names := make([]string, len(outs))
				for i, t := range outs {
					names[i] = t.Name
				}
				return BadInput("session %q: requested output %q was not produced; this request produced: %s", d.name, want, strings.Join(names, ", "))
			}
		}
		outs = sel
	}
	params := make([]Param, 0, 3*len(d.mods)+1)
	var queue, compute time.Duration
	for i := range d.mods {
		mr := &r.mods[i]
		if mr.state.Load() != stDone {
			continue
		}
		n := &d.mods[i]
		queue += mr.timing.Queue
		compute += mr.timing.Compute
		params = append(params,
			Param{n.queueKey, ms(mr.timing.Queue)},
			Param{n.computeKey, ms(mr.timing.Compute)},
			Param{n.totalKey, ms(mr.total)})
	}
	params = append(params, Param{"piccolo.e2e_ms", ms(time.Since(arrival))})
	*resp = InferResponse{ModelName: d.name, ID: req.ID, Parameters: params, Outputs: outs, Queue: queue, Compute: compute}
	return nil
}

// splitDim0 splits tensors that all have the same dimension 0 (n) into n items of
// tensors of shape [1, rest...]. Data is shared, not copied.
func splitDim0(ts []api.Tensor) ([][]api.Tensor, error) {
	items, err := api.SplitRows(ts)
	if err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	return items, nil
}

// joinDim0 concatenates the items' outputs on dimension 0, in item order. Every
// item must output the same names, datatypes and trailing dimensions.
func joinDim0(items [][]api.Tensor) ([]api.Tensor, error) {
	first := items[0]
	for i, it := range items {
		if err := api.CanBatch(first, it); err != nil {
			return nil, fmt.Errorf("fan-out item %d against item 0: %w", i, err)
		}
	}
	out := make([]api.Tensor, len(first))
	for j, t := range first {
		var rows int64
		size := 0
		for _, it := range items {
			u := it[j]
			rows += u.Shape[0]
			size += len(u.Data)
		}
		data := make([]byte, 0, size)
		for _, it := range items {
			data = append(data, it[j].Data...)
		}
		shape := append([]int64{rows}, t.Shape[1:]...)
		out[j] = api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: shape, Data: data}
	}
	return out, nil
}
