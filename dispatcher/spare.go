package dispatcher

import (
	"fmt"
	"time"
)

// SetSpare gives the dispatcher spare machines: machines of the pool that the
// plan leaves idle, each with this module's profile on its hardware (Batch,
// Concurrency, Duration; Group and Machine are ignored, Module must be the
// module's). A closed batch overflows to a spare machine when every machine of
// its group is busy, or the one its group chose is idle but slower than
// planned (its pace or straggler slowness) while another of the group is
// faster by more than a tenth, and it would complete after its earliest item
// is due there: to the spare that completes it first in time, or, with none in
// time, sooner than its machine would (overflowLocked; issue 11: overflow
// before refusal); admission (Predict) counts the spare machines too. A spare
// whose backend is down (MachineHealth.Down: ejected) takes no batch and
// admits nothing. Stats.Overflow counts the batches sent so; Stats.Spare the
// spare machines' work. SetSpare replaces the previous spare machines (nil:
// none); batches queued on those move to the current plan's machines. A plan
// swap keeps them. Errors name the bad slot; on error nothing changes. Any
// goroutine; not on the request path.
func (d *Dispatcher) SetSpare(slots []Slot) error {
	spare := make([]*machine, 0, len(slots))
	for i, s := range slots {
		switch {
		case s.Module != d.module:
			return fmt.Errorf("spare slot %d (%s): for module %q, not %q: %w", i, s.Backend, s.Module, d.module, ErrPlan)
		case s.Batch < 1 || s.Batch > MaxBatch:
			return fmt.Errorf("spare slot %d (%s): batch %d: must be in [1, %d]: %w", i, s.Backend, s.Batch, MaxBatch, ErrPlan)
		case s.Concurrency < 1 || s.Concurrency > MaxConcurrency:
			return fmt.Errorf("spare slot %d (%s): concurrency %d: must be in [1, %d]: %w", i, s.Backend, s.Concurrency, MaxConcurrency, ErrPlan)
		case s.Duration <= 0:
			return fmt.Errorf("spare slot %d (%s): duration %v: must be > 0: %w", i, s.Backend, s.Duration, ErrPlan)
		}
		s.Group, s.Machine = -1, i
		if s.Occupancy == 0 {
			s.Occupancy = 1
		}
		g := &group{batch: s.Batch, duration: s.Duration, occupancy: 1, slow: 1}
		m := newMachine(s, g)
		d.attach(m)
		g.machines = []*machine{m}
		g.refresh(d.clock.Now())
		spare = append(spare, m)
	}
	var out outList
	d.mu.Lock()
	defer d.flush(&out) // deferred first: runs after the unlock
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	moved := d.drainQueuesLocked(d.spare, nil)
	d.spare = spare
	now := d.clock.Now()
	for _, it := range moved {
		d.addLocked(it, now, &out)
	}
	return nil
}

// overflowLocked returns the spare machine b goes to instead of m, its
// group's choice, or nil. Only when b would complete on m after its
// earliest item is due: then the spare machine whose batch size holds b and
// that completes it first in time; with none in time, the one that
// completes it first if that is before m would. A batch closed by its
// deadline flush was timed to end exactly when due on its group's best
// machine; when that machine was taken meanwhile, an idle spare of the same
// duration ends it as late as the flush's timer fired (a millisecond),
// and the strict rule sent it instead to wait behind the busy machine's
// batch (one device 1.6x, seed 6: a batch of 5 queued 49 ms there, 21 ms
// late, 3 504s, beside three idle spares 1 ms short of its due).
func (d *Dispatcher) overflowLocked(b *Batch, m *machine, now time.Time) *machine {
	end := predictAt(m, m.g, now)
	due := b.due(m.g.duration)
	if due.IsZero() || !end.After(due) {
		return nil
	}
	var best *machine
	var bestEnd time.Time
	bestInTime := false
	for _, s := range d.spare {
		if s.slot.Batch < b.Size() || s.isDown() {
			continue
		}
		e := predictAt(s, s.g, now)
		inTime := !e.After(b.due(s.g.duration))
		switch {
		case inTime && (!bestInTime || e.Before(bestEnd)):
			best, bestEnd, bestInTime = s, e, true
		case !inTime && !bestInTime && e.Before(end) && (best == nil || e.Before(bestEnd)):
			best, bestEnd = s, e
		}
	}
	return best
}

// due returns the earliest Due of b's items on a machine of duration dur
// (zero: none is bounded).
func (b *Batch) due(dur time.Duration) time.Time {
	var at time.Time
	for _, it := range b.Items {
		if t := it.Due(dur); !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// spareAt returns when an item submitted now would complete at the earliest
// on a spare machine that is up (zero: none).
func (d *Dispatcher) spareAt(now time.Time) time.Time {
	var at time.Time
	for _, s := range d.spare {
		if s.isDown() {
			continue
		}
		if t := predictAt(s, s.g, now); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}
