package replan

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Fan-out distributions learned live (Llama's input-dependent flow): a
// fan-out module's counter (HandleFanOut) also counts each parent item by the
// items it brought; snapshots carry those counts (ModuleRate.FanOut); the
// controller plans the module with the measured distribution in place of
// the declared one (api.Module.FanOut) once MinFanOutSamples parent items
// are counted and they need another number of batches than the distribution
// in use (cause "fanout"; docs/planner.md, "Fan-out as a distribution").

// MinFanOutSamples is how many parent items a measured fan-out distribution
// needs before the controller plans with it: the planner provisions for the
// items at api.ProvisionedQuantile (99.9%), which 1,000 parent items place
// at or beyond their largest one.
const MinFanOutSamples = 1000

// maxFanOutMemory caps the generation of a fan-out counter whose parent
// items are slow to come: at 2 images/s one generation holds 1,000 of them
// in 500 s; at 1 image/s the measurement waits for 10 minutes at most.
const maxFanOutMemory = 10 * time.Minute

// fanOutGen counts parent items by the items they brought: [k] is the
// parent items that brought k (k > api.MaxFanOutItems counted at the
// maximum).
type fanOutGen [api.MaxFanOutItems + 1]atomic.Int64

// fanOutCounts is a counter's two generations: cur counts now, prev the
// generation before; a snapshot reports both, so the distribution covers the
// last one to two generations. Advance rotates them (under advMu).
type fanOutCounts struct {
	span      int64 // a generation, in buckets
	genStart  int64 // the bucket cur opened at
	cur, prev atomic.Pointer[fanOutGen]
}

// HandleFanOut is Handle for a fan-out module (api.Session.FanOuts): its
// counter also counts each parent item by its items (Counter.AddItems),
// over generations of the horizon or, when slower, of the time
// MinFanOutSamples parent items take at parentRate (req/s; at most
// maxFanOutMemory). Takes a lock: call it when a plan is loaded.
func (m *RateMonitor) HandleFanOut(session, module string, window time.Duration, parentRate float64) *Counter {
	c := m.handle(session, module, window) // Handle would drop the counts
	gen := m.Horizon()
	if parentRate > 0 && !math.IsInf(parentRate, 1) {
		gen = max(gen, min(time.Duration(MinFanOutSamples/parentRate*float64(time.Second)), maxFanOutMemory))
	}
	span := max(int64((gen+m.bucket-1)/m.bucket), 1)
	m.advMu.Lock()
	defer m.advMu.Unlock()
	if f := c.fan.Load(); f != nil && f.span == span {
		return c
	}
	f := &fanOutCounts{span: span, genStart: m.cur.Load()}
	f.cur.Store(new(fanOutGen))
	f.prev.Store(new(fanOutGen))
	c.fan.Store(f)
	return c
}

// AddItems counts the arrival of one parent item's items at the counter's
// module: items arrivals, and, on a fan-out's counter (HandleFanOut), one
// parent item that brought items. Lock-free and allocation-free.
func (c *Counter) AddItems(items int) {
	c.Add(int64(items))
	if f := c.fan.Load(); f != nil {
		f.cur.Load()[min(max(items, 0), api.MaxFanOutItems)].Add(1)
	}
}

// rotate opens a new generation when cur has run its span by bucket target
// (Advance, under advMu); a jump of two spans or more clears both.
func (f *fanOutCounts) rotate(target int64) {
	switch d := target - f.genStart; {
	case d >= 2*f.span:
		f.prev.Store(new(fanOutGen))
		f.cur.Store(new(fanOutGen))
		f.genStart = target
	case d >= f.span:
		f.prev.Store(f.cur.Load())
		f.cur.Store(new(fanOutGen))
		f.genStart += f.span
	}
}

// counts returns the parent items by items over both generations, Items
// ascending, weights the counts (not normalised); nil when none came.
func (f *fanOutCounts) counts() api.FanOut {
	cur, prev := f.cur.Load(), f.prev.Load()
	var out api.FanOut
	for k := range cur {
		if n := cur[k].Load() + prev[k].Load(); n > 0 {
			out = append(out, api.FanOutShare{Items: k, Share: float64(n)})
		}
	}
	return out
}

// FanOuts returns the measured fan-out distribution of every key of s that
// has one, the counts of keys listed twice (two gateways) added.
func (s RateSnapshot) FanOuts() map[ModuleKey]api.FanOut {
	var out map[ModuleKey]api.FanOut
	for _, r := range s.Rates {
		if len(r.FanOut) == 0 {
			continue
		}
		if out == nil {
			out = map[ModuleKey]api.FanOut{}
		}
		k := ModuleKey{r.Session, r.Module}
		out[k] = addFanOut(out[k], r.FanOut)
	}
	return out
}

// addFanOut returns the counts of a and b added by Items (both ascending).
func addFanOut(a, b api.FanOut) api.FanOut {
	out := make(api.FanOut, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i].Items < b[j].Items:
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].Items < a[i].Items:
			out = append(out, b[j])
			j++
		default:
			out = append(out, api.FanOutShare{Items: a[i].Items, Share: a[i].Share + b[j].Share})
			i, j = i+1, j+1
		}
	}
	return out
}

// fanOutDownMargin is how far below the distribution in use a measured one
// must be to re-plan down: its provisioned items with a quarter more must
// still need fewer batches, so a module whose items sit on a batch's edge
// does not re-plan back and forth.
const fanOutDownMargin = 1.25

// fanOutBatches is the batches of b items that a parent item's k items
// need (one at least: a module without a distribution is planned for one).
func fanOutBatches(k float64, b int) int {
	return max(int(math.Ceil(k/float64(b))), 1)
}

// fanOutShifted takes into the plan (c.fanOut) every measured fan-out
// distribution, from MinFanOutSamples parent items on, whose provisioned
// items (FanOut.Provisioned) need more batches of the module's largest
// planned batch than the distribution in use (the taken one, else the
// config's; none: one batch), or fewer with fanOutDownMargin to spare; and
// reports whether it took one. Run's goroutine.
func (c *Controller) fanOutShifted(measured map[ModuleKey]api.FanOut) bool {
	if c.placed == nil || len(measured) == 0 {
		return false
	}
	took := false
	for k, f := range measured {
		if f.Count() < MinFanOutSamples {
			continue
		}
		m := c.module(k)
		b := plannedBatch(c.placed, k)
		if m == nil || len(m.After) != 1 || b == 0 {
			continue
		}
		f, ok := f.Normalized()
		if !ok {
			continue
		}
		inUse, taken := c.fanOut[k]
		if !taken {
			inUse = m.FanOut
		}
		have := fanOutBatches(float64(inUse.Provisioned()), b)
		k999 := float64(f.Provisioned())
		if fanOutBatches(k999, b) > have || fanOutBatches(k999*fanOutDownMargin, b) < have {
			c.fanOut[k] = f
			took = true
		}
	}
	return took
}

// module returns k's module in the config, nil when it has none.
func (c *Controller) module(k ModuleKey) *api.Module {
	s, ok := c.cfg.Session(k.Session)
	if !ok {
		return nil
	}
	if i := s.ModuleIndex(k.Module); i >= 0 {
		return &s.Modules[i]
	}
	return nil
}

// plannedBatch returns the largest batch of k's groups in p, 0 when p does
// not plan k.
func plannedBatch(p *api.Plan, k ModuleKey) int {
	for _, s := range p.Sessions {
		if s.Name != k.Session {
			continue
		}
		for _, m := range s.Modules {
			if m.Name != k.Module {
				continue
			}
			b := 0
			for _, g := range m.Configs {
				b = max(b, g.Batch)
			}
			return b
		}
	}
	return 0
}

// dropFanOuts forgets the measured distributions of modules cfg no longer
// has or whose declared distribution it changes: the operator's new fanout
// wins, as a changed rate does over a measured one (applyConfig).
func (c *Controller) dropFanOuts(cfg *api.Config) {
	for k := range c.fanOut {
		was := c.module(k)
		s, ok := cfg.Session(k.Session)
		if !ok || was == nil {
			delete(c.fanOut, k)
			continue
		}
		i := s.ModuleIndex(k.Module)
		if i < 0 || !slices.Equal(s.Modules[i].FanOut, was.FanOut) {
			delete(c.fanOut, k)
		}
	}
}

// withFanOuts sets, in cfg (a copy whose module slices are its own:
// WithRates's), the measured distributions in use.
func withFanOuts(cfg *api.Config, fanOut map[ModuleKey]api.FanOut) {
	for i := range cfg.Sessions {
		s := &cfg.Sessions[i]
		for j := range s.Modules {
			if f, ok := fanOut[ModuleKey{s.Name, s.Modules[j].Name}]; ok {
				s.Modules[j].FanOut = f
			}
		}
	}
}
