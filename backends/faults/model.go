package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Executor returns exec with its models wrapped: they apply hang, fail,
// slow and shared to every batch. Load and Models pass through.
func (j *Injector) Executor(exec backends.Executor) backends.Executor {
	return &executor{inner: exec, j: j, ran: map[string]time.Time{}}
}

// SharedWindow is how recently another model must have started a batch on
// the backend for fault shared to slow a batch: the models take turns on
// the device (a one-lane device never runs two batches at once), and a model
// loaded but idle there (a spare) does not count.
const SharedWindow = time.Second

type executor struct {
	inner backends.Executor
	j     *Injector

	mu  sync.Mutex
	ran map[string]time.Time // when each model last started a batch (fault shared only)
}

// others records that name starts a batch at now and reports whether
// another model started one within SharedWindow.
func (x *executor) others(name string, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.ran[name] = now
	for m, at := range x.ran {
		if m != name && now.Sub(at) <= SharedWindow {
			return true
		}
	}
	return false
}

var _ backends.Executor = (*executor)(nil)

func (x *executor) Models() []string { return x.inner.Models() }

func (x *executor) Load(name string, batch, concurrency int) (backends.Model, error) {
	m, err := x.inner.Load(name, batch, concurrency)
	if err != nil {
		return nil, err
	}
	fm := &model{Model: m, j: x.j, x: x, name: name, lanes: make(chan struct{}, max(1, m.Info().Concurrency))}
	fm.profiled, _ = m.(profiled)
	return fm, nil
}

// profiled is a model that knows how long a batch of n items takes (the sim:
// its profiled duration before jitter); slow multiplies that instead of the
// measured time, which includes waiting for a lane.
type profiled interface {
	Duration(n int) time.Duration
}

type model struct {
	backends.Model
	j        *Injector
	x        *executor
	name     string
	profiled profiled // nil: measure
	// lanes holds a slow batch for all its k× time: the inner model frees its
	// own lane after 1×, so without these a slowed backend would still start
	// Concurrency batches every 1× and lose no throughput.
	lanes chan struct{}
}

var _ backends.Model = (*model)(nil)

// Run runs the batch, applying the active faults; with none, one atomic load.
func (m *model) Run(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	out, _, err := m.RunTimed(ctx, inputs, n)
	return out, err
}

var _ backends.TimedModel = (*model)(nil)

// RunTimed is Run with the batch's Timing: a slowed batch's extra time is
// device time (Compute: the inner model's times k, as the device of a
// backend run with --fault slow would report it), its wait for a lane of
// the slowed model is Queue, and so is a hang.
func (m *model) RunTimed(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, backends.Timing, error) {
	a := m.j.cur.Load()
	if a == nil {
		return backends.RunTimed(ctx, m.Model, inputs, n)
	}
	return m.runFaulty(ctx, a, inputs, n)
}

func (m *model) runFaulty(ctx context.Context, a *active, inputs []api.Tensor, n int) ([]api.Tensor, backends.Timing, error) {
	start := time.Now()
	for a != nil && a.set.Hang {
		select {
		case <-ctx.Done():
			return nil, backends.Timing{}, ctx.Err()
		case <-a.changed: // faults changed: look again
			a = m.j.cur.Load()
		}
	}
	if a == nil {
		out, tm, err := backends.RunTimed(ctx, m.Model, inputs, n)
		if err == nil {
			tm.Queue = max(time.Since(start)-tm.Compute, tm.Queue) // the hang waited
		}
		return out, tm, err
	}
	s := a.set
	if s.Fail > 0 && m.j.failNow(s.Fail) {
		return nil, backends.Timing{}, fmt.Errorf("%w: fail (a share %g of calls fails)", ErrInjected, s.Fail)
	}
	k := max(s.Slow, 1)
	if k > 1 && s.SlowShare > 0 && s.SlowShare < 1 && !m.j.failNow(s.SlowShare) {
		k = 1 // this batch is not in the slowed share
	}
	if s.Shared > 1 && m.x.others(m.name, m.j.now()) {
		k *= s.Shared
	}
	if k <= 1 {
		return backends.RunTimed(ctx, m.Model, inputs, n)
	}
	select {
	case m.lanes <- struct{}{}:
	case <-ctx.Done():
		return nil, backends.Timing{}, ctx.Err()
	}
	defer func() { <-m.lanes }()
	queued := time.Since(start)
	out, tm, err := backends.RunTimed(ctx, m.Model, inputs, n)
	if err != nil {
		return nil, backends.Timing{}, err
	}
	d := tm.Compute
	if m.profiled != nil {
		d = m.profiled.Duration(n)
	}
	extra := time.Duration(float64(d) * (k - 1))
	t := time.NewTimer(extra)
	defer t.Stop()
	select {
	case <-t.C:
		return out, backends.Timing{Queue: queued + tm.Queue, Compute: tm.Compute + extra}, nil
	case <-ctx.Done():
		return nil, backends.Timing{}, ctx.Err()
	}
}
