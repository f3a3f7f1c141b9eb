package dispatcher

import "time"

// Sweep takes the abandoned items (Item.Abandoned set) out of the open
// batches and of the batches queued on machines, plan and spare, and
// completes them with ErrCancelled on the caller's goroutine; a queued batch
// left with no item is taken off its machine (and its device), and the
// machines' estimates are recomputed, so that admission no longer counts
// the work. Batches already sent are not touched: their abandoned items run
// and are counted as dropped when the batch ends. It returns how many items
// it took out.
//
// Cost: O(items queued) under the lock; the data plane calls it when a
// request is abandoned, never on the path of a request that is not. Items
// moved to another dispatcher (Handover) are not found here; that one drops
// them at send.
func (d *Dispatcher) Sweep() int {
	var gone []*Item
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return 0
	}
	now := d.clock.Now()
	for _, q := range d.st.queues {
		b := q.open
		if b == nil || len(b.Items) == 0 {
			continue
		}
		n := len(gone)
		if gone = takeAbandoned(b, gone); len(gone) == n {
			continue
		}
		b.minDL = time.Time{}
		for _, it := range b.Items {
			if !it.Deadline.IsZero() && (b.minDL.IsZero() || it.Deadline.Before(b.minDL)) {
				b.minDL = it.Deadline
			}
		}
		switch at := q.sendBy(b.minDL, now); {
		case len(b.Items) == 0 || b.minDL.IsZero():
			if q.armed {
				q.armed = false
				q.timer.Stop()
			}
		case q.armed && at.After(now) && at.After(q.flushAt):
			q.arm(at, now) // its oldest item left: the flush can wait longer
		}
	}
	for _, ms := range [2][]*machine{d.st.machines, d.spare} {
		for _, m := range ms {
			changed := false
			for range m.pending.len() { // once round the ring, keeping its order
				b := m.pending.pop()
				n := len(gone)
				gone = takeAbandoned(b, gone)
				if len(b.Items) == 0 {
					d.stats.DummiesDropped += uint64(b.Dummies)
					d.recycleLocked(b) // takes it off the device too
					changed = true
					continue
				}
				changed = changed || len(gone) > n
				m.pending.push(b)
			}
			if changed {
				if d.admit {
					m.resync(now)
				}
				d.retimeLocked(m, now)
			}
		}
	}
	d.stats.Cancelled += uint64(len(gone))
	d.publishLocked(now)
	d.mu.Unlock()
	for _, it := range gone {
		it.Err, it.Finished = ErrCancelled, now
		it.Done(it)
	}
	return len(gone)
}

// takeAbandoned moves b's abandoned items onto gone, keeping the others in
// order.
func takeAbandoned(b *Batch, gone []*Item) []*Item {
	kept := b.Items[:0]
	for _, it := range b.Items {
		if it.abandoned() {
			gone = append(gone, it)
		} else {
			kept = append(kept, it)
		}
	}
	clear(b.Items[len(kept):])
	b.Items = kept
	return gone
}

// Classes is the number of priority classes (Item.Class): 0 high, 1 normal
// (the default), 2 low. The gateway maps Triton's `priority` request
// parameter onto them (docs/protocol.md, "Priority").
const Classes = 3

// ClassHeadroom[c] is the fraction of the time left until an item of class c
// is due (Item.Due) that admission lets its predicted completion take while
// a higher class is arriving too (over 1% of the items lately): a normal
// item is refused while a quarter of its time would be left, a low one
// while half would, so under overload the queues stop growing at what the
// lower classes may join and the higher classes' items, refused last, still
// find room (docs/protocol.md, "Priority", has the measured figures). With
// no higher class arriving, an item is judged as class 0: traffic of one
// class, whichever, is admitted as it was without classes.
var ClassHeadroom = [Classes]float64{1, 0.75, 0.5}

// DefaultClassFloor is Options.ClassFloor's default: a class whose share of
// the items admitted lately is below 5% is judged as class 0.
const DefaultClassFloor = 0.05

// classShareWeight is the weight of one item in the classes' shares: about
// the last 500 items count.
const classShareWeight = 1.0 / 512

// classPresent is the share of the items offered lately above which a class
// counts as arriving (its headroom then applies to the classes below it).
const classPresent = 0.01

// classOf returns c clamped to 0..Classes−1.
func classOf(c int) int {
	switch {
	case c <= 0:
		return 0
	case c >= Classes:
		return Classes - 1
	}
	return c
}

// dueFor returns when it must complete to be admitted, as Item.Due for a
// batch of duration dur, brought forward by its class's headroom when a
// higher class is arriving, unless the class is below its floor (then, as
// with no higher class, it is judged as class 0).
func (d *Dispatcher) dueFor(it *Item, dur time.Duration, now time.Time) time.Time {
	due := it.Due(dur)
	c := classOf(it.Class)
	if c == 0 || due.IsZero() || !due.After(now) || d.classAdmitted[c] < d.classFloor {
		return due
	}
	higher := false
	for k := range c {
		higher = higher || d.classOffered[k] > classPresent
	}
	if !higher {
		return due
	}
	return now.Add(time.Duration(float64(due.Sub(now)) * ClassHeadroom[c]))
}

// sharesLocked notes that class c was offered and says whether the classes'
// shares are kept: only once two classes or more have been offered. With one
// class the shares would only converge on it (offered and admitted 1), and
// dueFor gives that class its whole time either way, so Submit skips the two
// updates (BenchmarkSubmit's admission cases: about 12% of their time). When
// a second class first arrives, the first's shares are seeded with that
// converged state, the others start at their floor as in New, and the shares
// are kept from then on.
func (d *Dispatcher) sharesLocked(c int) bool {
	seen := d.classesOffered
	d.classesOffered |= 1 << c
	switch {
	case seen&(seen-1) != 0:
		return true // two classes or more already
	case seen == 0 || seen == 1<<c:
		return false // the first class, or still the only one
	}
	for k := range d.classOffered { // the second class: the first's converged shares
		d.classOffered[k], d.classAdmitted[k] = 0, d.classFloor // a class not seen yet starts at its floor, as in New
		if seen == 1<<k {
			d.classOffered[k], d.classAdmitted[k] = 1, 1
		}
	}
	return true
}

// offeredLocked counts an arrival of class c in the classes' offered shares.
func (d *Dispatcher) offeredLocked(c int) { ewmaShare(&d.classOffered, c) }

// admittedLocked counts an admission of class c in the admitted shares.
func (d *Dispatcher) admittedLocked(c int) { ewmaShare(&d.classAdmitted, c) }

// ewmaShare moves shares towards class c by one item's weight.
func ewmaShare(shares *[Classes]float64, c int) {
	for k := range shares {
		shares[k] -= classShareWeight * shares[k]
	}
	shares[c] += classShareWeight
}

// promoteLocked serves the higher classes first within p's queue: b, the
// batch about to start on p, takes the higher-class items of the batches
// queued behind it on p and gives them, one for one, its lowest-class
// items, so that every batch keeps its size and its place on the machine
// and the device. The floor: an item is moved back only while, in the
// later batch, it still completes by when it is due (Item.Due), so a class
// is delayed, never starved into its deadline by the classes above it.
// O(queued items × batch size), and only once items of two classes or more
// have been queued.
func (d *Dispatcher) promoteLocked(b *Batch, p *machine, now time.Time) {
	if d.classesSeen&(d.classesSeen-1) == 0 {
		return
	}
	dur := p.duration()
	lanes := max(p.slot.Concurrency, 1)
	for k := range p.pending.len() {
		later := p.pending.at(k)
		// later completes about this long from now: b first, then the
		// batches ahead of it, lanes at a time.
		ends := now.Add(time.Duration(k/lanes+2) * dur)
		for j, hi := range later.Items {
			c := classOf(hi.Class)
			worst := -1
			for i, lo := range b.Items {
				if lc := classOf(lo.Class); lc > c && (worst < 0 || lc > classOf(b.Items[worst].Class)) {
					if due := lo.Due(dur); due.IsZero() || !ends.After(due) {
						worst = i
					}
				}
			}
			if worst >= 0 {
				b.Items[worst], later.Items[j] = hi, b.Items[worst]
			}
		}
	}
}
