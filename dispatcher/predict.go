package dispatcher

import "time"

// Predict returns how long an item submitted now would take at least, from
// now to its completion: the wait for a lane of the machines its batch would
// go to, as the dispatcher has them queued (each lane's estimated free time,
// from the profiled durations of the batches running and queued on it), plus
// the batch's profiled duration, both scaled by the group's measured
// slowness; or on a spare machine (SetSpare) if that is earlier. It does not count the wait for batch-mates:
// that wait ends by the deadline flush, which is timed to meet the item's
// deadline (docs/dataplane.md, "Admission"). The batch goes to the group of
// the open batch the item would join (under TC, the group chosen when it
// opened; with no open batch, the group the next one opens for). Under a
// Policy of its own, outside this package, the earliest of all groups.
//
// Predict is what Options.Admission checks against Item.Due; the gateway
// calls it for its request-level estimate. O(1) a group, no allocation; any
// goroutine.
func (d *Dispatcher) Predict(now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0
	}
	st := d.st
	var at time.Time
	if p, ok := st.router.(peeker); ok {
		q := st.queues[p.peekJoin()]
		var g *group
		switch {
		case q.open != nil:
			g = q.open.g
		case q.m != nil:
			g = q.m.g
		default:
			g = st.groups[p.peekOpen(q.stream)]
		}
		at = predictAt(q.m, g, now)
	} else {
		for _, g := range st.groups {
			if t := predictAt(nil, g, now); at.IsZero() || t.Before(at) {
				at = t
			}
		}
	}
	if t := d.spareAt(now); !t.IsZero() && t.Before(at) {
		at = t
	}
	return at.Sub(now)
}

// admitsLocked is Options.Admission's rule for it joining b, q's open batch:
// it completes by it.Due on the machines b would go to, or on a spare machine
// whose batch holds b with it (where b would overflow).
func (d *Dispatcher) admitsLocked(q *queue, b *Batch, it *Item, now time.Time) bool {
	due := it.Due(b.g.duration)
	if due.IsZero() || !predictAt(q.m, b.g, now).After(due) {
		return true
	}
	for _, s := range d.spare {
		if s.slot.Batch > b.Size() && !predictAt(s, s.g, now).After(it.Due(s.g.duration)) {
			return true
		}
	}
	return false
}

// peeker is a Router that can say, without moving on, what Join and Open
// would return: TC's and RR's.
type peeker interface {
	peekJoin() int
	peekOpen(s int) int
}

// predictAt returns when an item joining an open batch now, for g (and, when
// m is not nil, for machine m alone), would complete at the earliest: the
// batch starts when it closes (no earlier than now) or when a lane of its
// machine frees, whichever is later. The dispatcher's lock must be held.
func predictAt(m *machine, g *group, now time.Time) time.Time {
	start := g.freeAt
	if m != nil {
		start = m.freeAt()
	}
	wait := max(start.Sub(now), 0)
	return now.Add(time.Duration(float64(wait+g.duration) * g.slow))
}

// Weights of slow's upper envelope: it follows a batch slower than it at
// once by slowUp, and decays towards faster ones by slowDown a batch, so it
// sits near the slow end of the durations' spread (with batches uniformly
// ±20% of their profile, about +15%).
const (
	slowUp   = 0.5
	slowDown = 0.01
)

// observe updates g.slow with a batch that ran for took.
func (g *group) observe(took time.Duration) {
	r := float64(took) / float64(g.duration)
	if r > g.slow {
		g.slow += slowUp * (r - g.slow)
	} else {
		g.slow += slowDown * (r - g.slow)
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

// refresh recomputes g.freeAt; called whenever a machine of g starts, queues
// or finishes a batch.
func (g *group) refresh() {
	var at time.Time
	for i, m := range g.machines {
		t := m.freeAt()
		if t.IsZero() {
			g.freeAt = t
			return
		}
		if i == 0 || t.Before(at) {
			at = t
		}
	}
	g.freeAt = at
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
// batches still running end at their start + the profiled duration (now if
// that has passed), the others are free now, and the queued batches take the
// earliest lane in turn. Backends are not as regular as their profiles;
// without this, the estimates would drift from the machine's real queue.
// O(lanes × queued), per batch.
func (m *machine) resync(now time.Time) {
	for i := range m.est {
		m.est[i] = now
		if i < len(m.running) {
			if end := m.running[i].Sent.Add(m.slot.Duration); end.After(now) {
				m.est[i] = end
			}
		}
	}
	for range m.pending.len() {
		lane := m.earliestLane()
		m.est[lane] = m.est[lane].Add(m.slot.Duration)
	}
}
