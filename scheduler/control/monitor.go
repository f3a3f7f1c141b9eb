package control

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Key names one module of one session: the unit whose arrival rate is measured
// and planned.
type Key struct {
	Session, Module string
}

// String formats k as "session/module".
func (k Key) String() string { return k.Session + "/" + k.Module }

// MonitorOptions configure a RateMonitor. The zero value is InferLine's envelope
// at 1 s, 5 s and 30 s over 100 ms buckets.
type MonitorOptions struct {
	// Bucket is the width of one ring bucket (default 100ms): rates are measured
	// over whole buckets, so a window's rate lags by at most one bucket.
	Bucket time.Duration
	// Windows are the sliding windows of the envelope (default 1s, 5s, 30s); each
	// must be a positive multiple of Bucket. The envelope is the highest rate
	// over them, so a burst shows in the short window and a sustained rate in
	// the long one.
	Windows []time.Duration
}

// DefaultWindows are the envelope's windows when MonitorOptions.Windows is empty.
var DefaultWindows = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}

// RateMonitor measures per (session, module) arrival rates over sliding windows
// (InferLine's traffic envelope). The request path resolves a Counter once with
// Handle and then calls Counter.Add: one atomic load and one atomic add, no lock,
// no allocation. Time moves only when Advance (or Snapshot, or Run) is called:
// the owner calls it at least once per bucket; a late call is caught up (the
// buckets it skipped read as empty).
//
// Handle, Observe, Advance, Snapshot and Counter.Add may be called from any
// goroutine.
type RateMonitor struct {
	bucket  time.Duration
	windows []time.Duration
	spans   []int // buckets per window
	n       int   // ring length: longest window + the open bucket
	start   time.Time

	cur atomic.Int64 // index of the open bucket since start

	mu       sync.Mutex // guards counters (Handle, Advance, Snapshot); not Add
	advMu    sync.Mutex // serialises Advance
	counters map[Key]*Counter
	list     atomic.Pointer[[]*Counter]
}

// Counter counts one (session, module)'s arrivals into the monitor's ring.
// Obtained from RateMonitor.Handle; valid for the monitor's lifetime.
type Counter struct {
	key  Key
	m    *RateMonitor
	ring []atomic.Int64
}

// NewRateMonitor returns a monitor whose first bucket opens at start. Errors
// name a bucket or window that is not positive or not a multiple of the bucket.
func NewRateMonitor(start time.Time, o MonitorOptions) (*RateMonitor, error) {
	if o.Bucket == 0 {
		o.Bucket = 100 * time.Millisecond
	}
	if o.Bucket < 0 {
		return nil, fmt.Errorf("rate monitor: bucket %v: must be > 0", o.Bucket)
	}
	if len(o.Windows) == 0 {
		o.Windows = DefaultWindows
	}
	m := &RateMonitor{bucket: o.Bucket, start: start, counters: map[Key]*Counter{}}
	for _, w := range o.Windows {
		if w <= 0 || w%o.Bucket != 0 {
			return nil, fmt.Errorf("rate monitor: window %v: must be a positive multiple of the bucket %v", w, o.Bucket)
		}
		m.windows = append(m.windows, w)
		m.spans = append(m.spans, int(w/o.Bucket))
		m.n = max(m.n, int(w/o.Bucket)+1)
	}
	m.list.Store(&[]*Counter{})
	return m, nil
}

// Windows returns the envelope's windows, shortest first as configured.
func (m *RateMonitor) Windows() []time.Duration { return append([]time.Duration(nil), m.windows...) }

// Handle returns the counter of (session, module), creating it on first use.
// Takes a lock: call it when a plan is loaded, not per request.
func (m *RateMonitor) Handle(session, module string) *Counter {
	k := Key{session, module}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.counters[k]; ok {
		return c
	}
	c := &Counter{key: k, m: m, ring: make([]atomic.Int64, m.n)}
	m.counters[k] = c
	l := append(append([]*Counter(nil), *m.list.Load()...), c)
	m.list.Store(&l)
	return c
}

// Observe counts one arrival at (session, module). It takes the handle lock:
// the request path should hold a Counter instead.
func (m *RateMonitor) Observe(session, module string) { m.Handle(session, module).Add(1) }

// Add counts n arrivals in the open bucket. Lock-free and allocation-free.
func (c *Counter) Add(n int64) {
	i := c.m.cur.Load() % int64(len(c.ring))
	c.ring[i].Add(n)
}

// Key returns the counter's (session, module).
func (c *Counter) Key() Key { return c.key }

// Advance moves the open bucket to the one holding now, clearing the buckets it
// passes so they count afresh. Times before the current bucket are ignored.
func (m *RateMonitor) Advance(now time.Time) {
	m.advMu.Lock()
	defer m.advMu.Unlock()
	target := int64(now.Sub(m.start) / m.bucket)
	cur := m.cur.Load()
	if target <= cur {
		return
	}
	list := *m.list.Load()
	// Clear the buckets that open between cur and target (at most the whole
	// ring) before publishing target, so Add never lands in a stale bucket.
	from := max(cur+1, target-int64(m.n)+1)
	for i := from; i <= target; i++ {
		j := i % int64(m.n)
		for _, c := range list {
			c.ring[j].Store(0)
		}
	}
	m.cur.Store(target)
}

// Snapshot advances to now and returns every counter's rates over the closed
// buckets of each window. Early on, a window longer than the time measured so
// far is measured over what there is (at least one bucket), so the first rates
// appear after one bucket.
func (m *RateMonitor) Snapshot(now time.Time) Snapshot {
	m.Advance(now)
	cur := m.cur.Load()
	s := Snapshot{At: now, Windows: m.Windows(), Rates: make([]ModuleRate, 0, len(*m.list.Load()))}
	order := sortedSpans(m.spans)
	for _, c := range *m.list.Load() {
		r := ModuleRate{Session: c.key.Session, Module: c.key.Module, Windows: make([]float64, len(m.spans))}
		if cur == 0 {
			s.Rates = append(s.Rates, r)
			continue
		}
		var sum int64
		done := 0
		// Walk the closed buckets newest first; each window's rate is the sum
		// over its span (shorter when less time has been measured).
		for _, wi := range order {
			span := min(m.spans[wi], int(cur))
			for ; done < span; done++ {
				sum += c.ring[(cur-1-int64(done))%int64(m.n)].Load()
			}
			r.Windows[wi] = float64(sum) / (float64(span) * m.bucket.Seconds())
			r.Envelope = math.Max(r.Envelope, r.Windows[wi])
		}
		s.Rates = append(s.Rates, r)
	}
	sort.Slice(s.Rates, func(i, j int) bool {
		a, b := s.Rates[i], s.Rates[j]
		return a.Session < b.Session || a.Session == b.Session && a.Module < b.Module
	})
	return s
}

func sortedSpans(spans []int) []int {
	idx := make([]int, len(spans))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return spans[idx[a]] < spans[idx[b]] })
	return idx
}

// Run advances the monitor every bucket on clock until ctx ends; returns
// ctx.Err(). Call it from one goroutine, or call Advance from a ticker of your own.
func (m *RateMonitor) Run(ctx context.Context, clock Clock) error {
	c, stop := clock.Tick(m.bucket)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c:
			m.Advance(clock.Now())
		}
	}
}

// Snapshot is the rates a monitor measured at At: JSON-ready, so a gateway can
// report it to a remote scheduler. Immutable once made.
type Snapshot struct {
	At      time.Time       `json:"at"`
	Windows []time.Duration `json:"windows"`
	Rates   []ModuleRate    `json:"rates"`
}

// ModuleRate is one (session, module)'s measured arrival rate in req/s: per
// window (in Snapshot.Windows order) and the envelope, their maximum.
type ModuleRate struct {
	Session  string    `json:"session"`
	Module   string    `json:"module"`
	Envelope float64   `json:"envelope"`
	Windows  []float64 `json:"windows"`
}

// Envelopes returns the envelope rate (req/s) of every key in s.
func (s Snapshot) Envelopes() map[Key]float64 {
	out := make(map[Key]float64, len(s.Rates))
	for _, r := range s.Rates {
		out[Key{r.Session, r.Module}] += r.Envelope
	}
	return out
}

// Current returns the rate (req/s) of every key in s over the shortest window:
// what arrives now, without the envelope's memory of bursts.
func (s Snapshot) Current() map[Key]float64 {
	out := make(map[Key]float64, len(s.Rates))
	w := 0
	for i, d := range s.Windows {
		if d < s.Windows[w] {
			w = i
		}
	}
	for _, r := range s.Rates {
		if w < len(r.Windows) {
			out[Key{r.Session, r.Module}] += r.Windows[w]
		} else {
			out[Key{r.Session, r.Module}] += r.Envelope
		}
	}
	return out
}
