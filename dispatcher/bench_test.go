package dispatcher

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// poolSender completes batches after their duration on a virtual clock, with pooled
// completion records: the simulator's way, so the benchmark measures the dispatcher.
type poolSender struct {
	clock *VirtualClock
	free  []*completion
}

type completion struct {
	s  *poolSender
	b  *Batch
	t  Timer
	fn func()
}

func (s *poolSender) Send(b *Batch) {
	var c *completion
	if n := len(s.free); n > 0 {
		c = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		c = &completion{s: s}
		c.fn = c.fire
	}
	c.b = b
	if c.t == nil {
		c.t = s.clock.AfterFunc(b.Slot.Duration, c.fn)
	} else {
		c.t.Reset(b.Slot.Duration)
	}
}

func (c *completion) fire() {
	b := c.b
	c.b = nil
	c.s.free = append(c.s.free, c)
	b.Done(nil, nil)
}

// BenchmarkSubmit measures one item's trip through the TC dispatcher on a virtual
// clock: Submit, batching, dispatch and completion, under each flush mode, and
// with admission (Options.Admission: Predict on every Submit), and placed on
// devices as the gateway places them (Options.Devices; the groups share one
// backend, whose machines are peers), and stacked (16 machines of a pool
// shorter than the plan on one backend, busy: the device decides every
// prediction), and with the admission margin the gateway keeps at a
// session's sources (Options.HandoffMargin). Target: 0 allocs/op.
func BenchmarkSubmit(b *testing.B) {
	for _, c := range []struct {
		p       Policy
		f       Flush
		admit   bool
		placed  bool
		stacked bool // one group of 16 machines on one backend
		margin  bool // Options.HandoffMargin 2 ms
	}{{TC{}, FlushDeadline, false, false, false, false}, {RR{}, FlushDeadline, false, false, false, false},
		{TC{}, FlushIdle, false, false, false, false}, {RR{}, FlushIdle, false, false, false, false},
		{TC{}, FlushIdle, true, false, false, false}, {RR{}, FlushIdle, true, false, false, false},
		{TC{}, FlushIdle, true, true, false, false}, {TC{}, FlushIdle, true, true, true, false}, {TC{}, FlushIdle, true, true, false, true}} {
		p := c.p
		name := p.Name() + "/" + c.f.Name()
		if c.admit {
			name += "/admission"
		}
		if c.stacked {
			name += "/stacked"
		} else if c.placed {
			name += "/devices"
		}
		if c.margin {
			name += "/margin"
		}
		b.Run(name, func(b *testing.B) {
			mp := api.ModulePlan{Name: "m", Rate: 1000, DummyRate: 50, BudgetMs: 100, Configs: []api.GroupPlan{
				{Batch: 16, Concurrency: 2, DurationMs: 20, Machines: 2, Rate: 800},
				{Batch: 4, Concurrency: 1, DurationMs: 10, Machines: 1.5, Rate: 250}}}
			var devs DeviceTable
			if c.stacked {
				mp.Configs = []api.GroupPlan{{Batch: 16, Concurrency: 1, DurationMs: 8, Machines: 16, Rate: 1000}}
				mp.Configs[0].Backends = make([]string, 16)
				for i := range mp.Configs[0].Backends {
					mp.Configs[0].Backends[i] = "d0"
				}
				devs = &Devices{}
			} else if c.placed {
				mp.Configs[0].Backends = []string{"d0", "d1"}
				mp.Configs[1].Backends = []string{"d1", "d2"}
				devs = &Devices{}
			}
			clock := NewVirtualClock(t0)
			s := &poolSender{clock: clock}
			var margin time.Duration
			if c.margin {
				margin = 2 * time.Millisecond
			}
			d, err := New(mp, Options{Policy: p, Flush: c.f, Admission: c.admit, HandoffMargin: margin, Clock: clock, Sender: s, Devices: devs})
			if err != nil {
				b.Fatal(err)
			}
			const pool = 4096
			var free []*Item
			done := func(it *Item) { free = append(free, it) }
			for i := 0; i < pool; i++ {
				free = append(free, &Item{Done: done})
			}
			gap := time.Second / 1000
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clock.Run(clock.Now().Add(gap))
				it := free[len(free)-1]
				free = free[:len(free)-1]
				it.Arrival, it.Deadline = time.Time{}, time.Time{}
				if err := d.Submit(it); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
