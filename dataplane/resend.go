package dataplane

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// run runs a batch on slot from (client c) and, when that fails in a way
// another machine may not (retryReasonOf), again on another machine of the
// module (Dispatcher.Alternate: from's group first, up, not slow), at most
// maxTries calls in all, while the latest deadline of the batch's items leaves
// the other machine's profiled duration. Inference is idempotent, so a batch
// whose connection broke mid-call may run twice on backends; each item still
// gets one answer. A failure at the transport ejects the backend first
// (Health.eject), so the batches behind this one already avoid it. wait is
// how long the first call was expected to queue on its backend behind other
// dispatchers' batches (Batch.Expected less the profile): the straggler
// measure and the hedge timer count from after it.
func (lm *liveModule) run(ctx context.Context, from *dispatcher.Slot, c *backends.Client, items [][]api.Tensor, dummies int,
	latest time.Time, wait time.Duration) (out [][]api.Tensor, errs []error, err error) {
	var tried [maxTries]string
	on := lm // whose machines run the batch: lm's, or the next plan's module after a re-placement
	for try := 0; ; try++ {
		tried[try] = from.Backend
		out, errs, err = on.attempt(ctx, from, c, items, dummies, wait)
		wait = 0 // a retry goes to another backend, unqueued as far as this dispatcher knows
		if err == nil || try+1 == maxTries || ctx.Err() != nil {
			return out, errs, err
		}
		why, ok := retryReasonOf(err)
		if !ok {
			return out, errs, err
		}
		alt, ok := on.disp.Alternate(from, len(items)+dummies, tried[:try+1]...)
		if !ok { // no other machine: the module's only one died; the re-placed plan's may take it
			if on = on.awaitReplacement(from, why, latest); on == nil {
				return out, errs, err
			}
			if alt, ok = on.disp.Alternate(from, len(items)+dummies, tried[:try+1]...); !ok {
				return out, errs, err
			}
		}
		if time.Now().Add(alt.Duration).After(latest) {
			return out, errs, err
		}
		if c = on.clients[alt.Backend]; c == nil {
			return out, errs, err
		}
		lm.h.retries[why].Add(1)
		from = &alt
	}
}

// maxReplacementWait bounds how long a failed batch waits for a health
// re-placement (awaitReplacement); a failed re-placement tries again after
// 500 ms (ReplaceOnEjection).
const maxReplacementWait = 2 * time.Second

// awaitReplacement is what run does for a batch whose call failed on a
// machine that could not run it (why: not sent, the connection broke, the
// model not loaded; not an answered failure) when no other machine of the
// module can take it: the plan had the module's only machine on a backend
// that just died. When the LiveSwitch serving it will re-place the plan on a
// backend of the same hardware that is up (LiveSwitch.canReplace), it waits
// for the next runner to be swapped in, at most maxReplacementWait and no later than
// latest less the module's shortest batch, and returns that runner's module
// (same session, module and model), on whose machines run retries the
// batch (within its maxTries); nil when there is none to wait for, or none
// came in time. The
// batch keeps its lane on this module's dead machine meanwhile, as a retry
// runs beside the target machine's own batches (Dispatcher.Alternate).
// Before this, SIGKILLing two of three static backends, the placed one
// among them, failed the 16 requests of the two batches in flight (503)
// while the re-placement took 3 ms (TestGatewayStaticBackendKilled/two).
func (lm *liveModule) awaitReplacement(from *dispatcher.Slot, why retryReason, latest time.Time) *liveModule {
	r := lm.owner.Load()
	if r == nil || r.sw == nil || why == retryFailed || !r.sw.canReplace(from.Hardware, from.Backend) {
		return nil
	}
	wait := min(time.Until(latest)-lm.minDuration, maxReplacementWait)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.replaced:
	case <-t.C:
		return nil
	}
	nm := r.sw.cur.Load().runner.moduleOrNil(lm.session, lm.name)
	if nm == nil || nm == lm || nm.model != lm.model {
		return nil
	}
	return nm
}

// callResult is one call's outcome in a hedged attempt.
type callResult struct {
	out   [][]api.Tensor
	errs  []error
	tm    backends.Timing
	err   error
	hedge bool
}

// attempt is one call of a batch on from, hedged: when the call is still
// running hedgeAfter times from's profiled duration, the deadline leaves
// another machine's duration and the hedge budget allows, the batch is also
// sent to another machine (competitive execution, as Cloudflow's and Llama's
// straggler mitigation); the first answer wins and the other call is
// cancelled. attempt returns only once both calls have returned, so no call
// reads the items' inputs after the batch is done. It feeds the backend's
// straggler EWMA and ejects it on a transport failure.
func (lm *liveModule) attempt(ctx context.Context, from *dispatcher.Slot, c *backends.Client, items [][]api.Tensor, dummies int, wait time.Duration) ([][]api.Tensor, []error, error) {
	h := lm.h
	bh := lm.health[from.Backend]
	h.batches.Add(1)
	start := time.Now()
	if lm.race > 1 && len(lm.clients) > 1 {
		return lm.raceAttempt(ctx, from, c, items, dummies, wait, start)
	}
	if h.opts.HedgeBudget <= 0 || from.Duration <= 0 || len(lm.clients) < 2 { // no hedge possible: no timer, no goroutine
		out, errs, tm, err := lm.infer(ctx, c, from.Backend, items, dummies)
		lm.observe(bh, from, wait, start, len(items)+dummies, tm, err)
		return out, errs, err
	}
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	ch := make(chan callResult, 2)
	go func() {
		out, errs, tm, err := lm.inferRecovered(pctx, c, from.Backend, items, dummies)
		ch <- callResult{out: out, errs: errs, tm: tm, err: err}
	}()
	timer := time.NewTimer(wait + hedgeAfter*from.Duration)
	defer timer.Stop()
	select {
	case r := <-ch:
		lm.observe(bh, from, wait, start, len(items)+dummies, r.tm, r.err)
		return r.out, r.errs, r.err
	case <-timer.C:
	}
	alt, ok := lm.disp.Alternate(from, len(items)+dummies, from.Backend)
	var hc *backends.Client
	if ok {
		hc = lm.clients[alt.Backend]
	}
	if dl, has := ctx.Deadline(); hc == nil || has && time.Now().Add(alt.Duration).After(dl) || !h.allowHedge() {
		r := <-ch
		lm.observe(bh, from, wait, start, len(items)+dummies, r.tm, r.err)
		return r.out, r.errs, r.err
	}
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	hstart := time.Now()
	abh := lm.health[alt.Backend]
	go func() {
		out, errs, tm, err := lm.inferRecovered(hctx, hc, alt.Backend, items, dummies)
		ch <- callResult{out: out, errs: errs, tm: tm, err: err, hedge: true}
	}()
	first := <-ch
	if first.err != nil { // the other call may still answer
		if second := <-ch; second.err == nil {
			first, second = second, first
			lm.settle(bh, abh, from, &alt, wait, start, hstart, len(items)+dummies, first)
			return first.out, first.errs, first.err
		}
		lm.settle(bh, abh, from, &alt, wait, start, hstart, len(items)+dummies, first)
		return first.out, first.errs, first.err
	}
	lm.settle(bh, abh, from, &alt, wait, start, hstart, len(items)+dummies, first)
	pcancel()
	hcancel()
	<-ch // the loser, cancelled
	return first.out, first.errs, first.err
}

// settle records a hedged attempt decided by win: the hedge's outcome and
// machine time, and the winner's duration in its backend's EWMA (the loser's
// elapsed time counts too, as a lower bound: a straggler whose batches are
// always hedged must still look slow; less the network-and-host share the
// winner's reported time shows).
func (lm *liveModule) settle(bh, abh *backendHealth, from, alt *dispatcher.Slot, wait time.Duration, start, hstart time.Time, n int, win callResult) {
	h := lm.h
	h.hedgeNanos.Add(int64(time.Since(hstart)))
	if win.hedge {
		h.hedgesWon.Add(1)
		lm.observe(abh, alt, 0, hstart, n, win.tm, win.err)
		if win.err == nil && bh != nil {
			lower := time.Since(start)
			if win.tm.Reported() { // less the host share the winner's answer shows: a saturated gateway is not the loser's device
				lower -= max(time.Since(hstart)-win.tm.Queue-win.tm.Compute, 0)
			}
			h.observe(bh, lower, wait+from.Duration)
		}
		return
	}
	h.hedgesLost.Add(1)
	lm.observe(bh, from, wait, start, n, win.tm, win.err)
}

// failedRatio is what a batch the backend answered with an error (INTERNAL, a
// malformed output) counts for in its straggler EWMA: such a batch costs its
// duration and a retry's, and more. A backend that fails most of its batches
// then counts as slow (is down-weighted, and re-placed after a spare) while
// one that fails now and then does not (one failure lifts an EWMA of 1 to 1.3;
// 10% failed holds it near 1.15).
const failedRatio = 2.5

// observe feeds one call's outcome to its backend's health: its duration to
// the straggler EWMA when it succeeded or ran out of time, failedRatio when
// the backend answered an error, an ejection when it failed at the transport.
// A batch of n items (dummies included) that succeeded is also the
// calibration's sample (HealthOptions.Calibration) and, for a full batch,
// its backend's pace (Health.paced): per batch, the estimator's lock and the
// backend's, nothing per request.
//
// The duration is the device's own when the backend reported it (tm, the
// answer's compute time: docs/calibration.md, "Device time"), measured
// against the slot's profile; the rest of the round trip, less the
// backend's queue, is the network-and-host share (Health.hostShare), kept
// apart so that a gateway whose own CPU is saturated does not take its
// devices for slow. A backend that reports no time is measured as before by
// the round trip: against wait + the profile (the time it was expected to
// queue behind other dispatchers' batches on a shared backend is not
// slowness), and backendHealth.ran says how long it ran for the calibration.
func (lm *liveModule) observe(bh *backendHealth, s *dispatcher.Slot, wait time.Duration, start time.Time, n int, tm backends.Timing, err error) {
	if err == nil && tm.Reported() {
		lm.addDevice(s.Hardware, tm.Compute/time.Duration(max(s.Concurrency, 1)))
	}
	if bh == nil {
		return
	}
	expect := wait + s.Duration
	switch why, _ := retryReasonOf(err); {
	case err == nil:
		now := time.Now()
		took := now.Sub(start)
		if tm.Reported() {
			bh.ran(start, now, s.Concurrency, wait) // keeps the backend's last end for a batch that reports none
			lm.h.hostShare(bh, took-tm.Queue-tm.Compute)
			bh.lastQueue.Store(int64(tm.Queue))
			bh.lastCompute.Store(int64(tm.Compute))
			lm.learn(bh, s, n, tm.Compute, now)
			lm.h.observe(bh, tm.Compute, s.Duration)
			return
		}
		if run, ok := bh.ran(start, now, s.Concurrency, wait); ok {
			lm.learn(bh, s, n, run, now)
		}
		lm.h.observe(bh, took, expect)
	case ejects(err):
		lm.h.eject(bh, err, time.Now())
	case why == retryFailed:
		lm.h.observe(bh, time.Duration(failedRatio*float64(s.Duration))+wait, expect)
	case errors.Is(err, context.DeadlineExceeded):
		lm.h.observe(bh, time.Since(start), expect) // at least this slow: a hanging backend
	}
}

// learn hands a batch of n items that ran run on bh's device to the
// calibration and, for a full batch, to the backend's pace.
func (lm *liveModule) learn(bh *backendHealth, s *dispatcher.Slot, n int, run time.Duration, now time.Time) {
	c := lm.h.opts.Calibration
	if c == nil {
		return
	}
	c.Observe(lm.model, s.Hardware, s.Backend, n, s.Concurrency, run, now)
	if p := lm.profiledAt(s); p > 0 && n >= s.Batch {
		lm.h.paced(bh, float64(run)/float64(p), now)
	}
}

// raceAttempt runs a batch of a raced module (api.Module.Race = k, Cloudflow's
// competitive execution): on from and at once on up to k−1 other machines of
// the module (Dispatcher.Alternate: from's group first, not slow, idle), the
// first answer taken and the other calls cancelled. A copy that fails leaves
// the race to the others; the batch fails only when every call did (with
// from's error). Like a hedge, a copy takes no lane of its machine: the
// planner provisioned k times the machines, so each carries its share of
// copies beside its own batches. raceAttempt returns only once every call has
// returned, so no call reads the items' inputs after the batch is done.
func (lm *liveModule) raceAttempt(ctx context.Context, from *dispatcher.Slot, c *backends.Client, items [][]api.Tensor, dummies int,
	wait time.Duration, start time.Time) ([][]api.Tensor, []error, error) {
	h := lm.h
	n := len(items) + dummies
	var slots [api.MaxRace]dispatcher.Slot
	var exclude [api.MaxRace]string
	slots[0], exclude[0] = *from, from.Backend
	k := 1
	for k < lm.race {
		alt, ok := lm.disp.Alternate(from, n, exclude[:k]...)
		if !ok || lm.clients[alt.Backend] == nil {
			break
		}
		slots[k], exclude[k] = alt, alt.Backend
		k++
	}
	if k == 1 { // no other machine up: one call, as unraced
		out, errs, tm, err := lm.infer(ctx, c, from.Backend, items, dummies)
		lm.observe(lm.health[from.Backend], from, wait, start, n, tm, err)
		return out, errs, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type raced struct {
		callResult
		i int
	}
	ch := make(chan raced, k)
	for i := range k {
		cl := c
		if i > 0 {
			cl = lm.clients[slots[i].Backend]
		}
		backend := slots[i].Backend
		go func() {
			out, errs, tm, err := lm.inferRecovered(rctx, cl, backend, items, dummies)
			ch <- raced{callResult{out: out, errs: errs, tm: tm, err: err}, i}
		}()
	}
	var win, firstErr raced
	won := false
	var back [api.MaxRace]bool // which calls have returned
	for got := 0; got < k; got++ {
		r := <-ch
		back[r.i] = true
		if won {
			continue // a loser, cancelled
		}
		if r.err != nil {
			if r.i == 0 || firstErr.err == nil {
				firstErr = r
			}
			if r.i == 0 || !errors.Is(r.err, context.Canceled) {
				lm.observe(lm.health[slots[r.i].Backend], &slots[r.i], 0, start, n, r.tm, r.err)
			}
			continue
		}
		win, won = r, true
		h.raceNanos.Add(int64(k-1) * int64(time.Since(start)))
		if r.i == 0 {
			h.racesLost.Add(1)
			lm.observe(lm.health[from.Backend], from, wait, start, n, r.tm, nil)
		} else {
			h.racesWon.Add(1)
			lm.observe(lm.health[slots[r.i].Backend], &slots[r.i], 0, start, n, r.tm, nil)
		}
		// The calls still running took at least this long: a machine that
		// always loses must still look slow (as a hedge's loser, settle).
		for i := range k {
			if bh := lm.health[slots[i].Backend]; !back[i] && bh != nil {
				expect := slots[i].Duration
				if i == 0 {
					expect += wait // only the first choice was expected to queue
				}
				h.observe(bh, time.Since(start), expect)
			}
		}
		cancel()
	}
	if !won {
		return firstErr.out, firstErr.errs, firstErr.err
	}
	return win.out, win.errs, win.err
}

// addDevice counts d of device time (machine-nanoseconds) on hardware for
// metrics.GatewayDeviceMachineSecondsTotal. Any goroutine.
func (lm *liveModule) addDevice(hardware string, d time.Duration) {
	v, ok := lm.device.Load(hardware)
	if !ok {
		v, _ = lm.device.LoadOrStore(hardware, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(int64(d))
}
