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
// time, sooner than its machine would (Dispatcher.target; issue 11: overflow
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
