package dispatcher

import "time"

// Handover moves every item of d that has not been sent to to, the
// dispatcher that takes over d's module (a new plan's, built beside d:
// dataplane.LiveSwitch.Apply), and returns how many it moved. Unsent are the
// items in d's open batches and in the batches queued on its machines (its
// plan's and its spare ones); the batches d has already handed to its Sender
// finish on d, and their lanes free on d, as usual.
//
// The moved items join to's open batches in arrival order, as SetPlan moves
// items to a new plan's slots (from there they fill, flush and queue on to's
// machines like to's own): they keep their Done callbacks, Tags, Deadlines and
// Expiries, and they are not admitted again (they were once, by d; no
// ErrOverloaded, no arrival in FlushIdle's gap) but count in to's queues, so
// that to's Predict and admission see them. One whose expiry has passed by
// the time its batch is sent completes with ErrDeadline there, as it would
// have on d. d's Stats count them in HandedOver, to's in TakenOver (and, once
// done, in Completed).
//
// to also takes the slowness d measured (each group's envelope of measured
// over profiled batch durations, by backend) for its machines on the same
// backends, where it has measured less: a fresh dispatcher starts at 1, and
// admitted as if its backends ran as profiled until its own batches ended
// (live, with a plan made live every 400 ms at 4× overload, 2 runs of 5
// answered 6 and 42 of 1840 requests 504; with it, none of 6 did:
// docs/dataplane.md, "Admission").
//
// Afterwards d has no unsent item: its lane estimates are recomputed without
// the batches taken away. d stays open: an item submitted to it later (a
// request that chose d just before it was replaced) queues on d, admitted
// against d's machines, which no longer count the work moved away; another
// Handover would move it. to must serve the same module with the same model and
// inputs; the caller checks that (Handover only refuses another module's
// name, moving nothing). If to is closed, the items go back to d; if d is
// closed too, they complete with ErrClosed, as Close completes its queue.
//
// Lock order: d's lock is taken and released before to's, never both at
// once, so Handover is safe beside Submit on either and a Handover the other
// way. Any goroutine; O(items moved); not on the request path.
func (d *Dispatcher) Handover(to *Dispatcher) int {
	if to == nil || to == d || to.module != d.module {
		return 0
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return 0
	}
	items := d.drainLocked()
	if len(items) > 0 {
		d.resyncLocked(d.clock.Now())
	}
	slow := d.slownessLocked()
	d.mu.Unlock()
	to.inherit(slow)
	if len(items) == 0 {
		return 0
	}
	if to.takeOver(items, true) {
		d.mu.Lock()
		d.stats.HandedOver += uint64(len(items))
		d.mu.Unlock()
		return len(items)
	}
	if !d.takeOver(items, false) {
		now := d.clock.Now()
		for _, it := range items {
			it.Err, it.Finished = ErrClosed, now
			it.Done(it)
		}
	}
	return 0
}

// takeOver re-submits items, drained from another dispatcher (handed: counted
// in TakenOver) or from d itself (the other was closed), to d's queues; false
// if d is closed, with nothing taken.
func (d *Dispatcher) takeOver(items []*Item, handed bool) bool {
	var out outList
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.resubmitLocked(items, d.clock.Now(), &out)
	if handed {
		d.stats.TakenOver += uint64(len(items))
	}
	d.mu.Unlock()
	d.flush(&out)
	return true
}

// resyncLocked recomputes every machine's lane estimates from the batches
// still running and queued on it (after drainLocked: running only).
func (d *Dispatcher) resyncLocked(now time.Time) {
	for _, m := range d.st.machines {
		m.resync(now)
	}
	for _, m := range d.spare {
		m.resync(now)
	}
}

// slownessLocked returns, by backend, the slowness (group.slow) d has
// measured on its plan's machines placed there.
func (d *Dispatcher) slownessLocked() map[string]float64 {
	out := make(map[string]float64, len(d.st.machines))
	for _, m := range d.st.machines {
		out[m.slot.Backend] = max(out[m.slot.Backend], m.g.slow)
	}
	return out
}

// inherit raises each group's slowness to what another dispatcher measured
// on the backends of its machines (slownessLocked), so that a dispatcher
// replacing another does not admit as if its backends ran as profiled until
// its own batches have ended.
func (d *Dispatcher) inherit(slow map[string]float64) {
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.st.machines {
		if s, ok := slow[m.slot.Backend]; ok && s > m.g.slow {
			m.g.slow, m.g.seen = s, now
			d.armRelaxLocked()
		}
	}
}
