package replan

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// ModuleKey names one module of one session: the unit whose arrival rate is measured
// and planned.
type ModuleKey struct {
	Session, Module string
}

// String formats k as "session/module".
func (k ModuleKey) String() string { return k.Session + "/" + k.Module }

// MonitorOptions configure a RateMonitor. The zero value measures in 100 ms
// buckets and keeps a 30 s horizon.
type MonitorOptions struct {
	// Bucket is the width of one ring bucket (default 100ms): rates are measured
	// over whole buckets, so a window's rate lags by at most one bucket.
	Bucket time.Duration
	// Horizon is how far back the envelope looks (default DefaultHorizon); a
	// positive multiple of Bucket. A counter's window is at most the horizon.
	Horizon time.Duration
}

// The envelope rule (docs/control-plane.md, "Rate monitor"). A session's
// arrivals are counted in windows of EnvelopeWindow(SLO, configured rate);
// its envelope is the highest window rate within the last DefaultHorizon.
const (
	// DefaultHorizon is the envelope's memory: the plan keeps capacity for the
	// peak window of the last 30 s, as InferLine's tuner scales down only to
	// the highest rate of the last 30 s. It is also the down hysteresis's
	// first half: a fall shows in the envelope once its peak has left the horizon.
	DefaultHorizon = 30 * time.Second
	// MinWindowArrivals floors a window at the time this many arrivals take at
	// the configured rate: one window's Poisson noise is then at most
	// 1/√100 = 10 %, half the controller's 20 % up band, so a short SLO at a
	// low rate does not re-plan on noise. On steady Poisson traffic the
	// envelope is then 1.2–1.3× the mean at 20, 150 and 1000 req/s; at
	// 20 req/s over a 100 ms SLO without the floor, 3.5× (TestPoissonEnvelope).
	MinWindowArrivals = 100
	// NoRateWindow is the window of a session whose configured rate is 0 (no
	// rate to floor by) and whose SLO is shorter.
	NoRateWindow = time.Second
)

// EnvelopeWindow returns the window the arrival envelope of a session is
// measured over: its SLO, raised to hold MinWindowArrivals arrivals at
// ratePerSec (the configured rate, req/s; 0: raised to NoRateWindow). The
// monitor rounds it up to whole buckets and caps it at its horizon. A burst
// shorter than the window counts by its volume spread over the window (what
// the SLO's queues must absorb), not by its momentary rate.
func EnvelopeWindow(slo time.Duration, ratePerSec float64) time.Duration {
	floor := NoRateWindow
	if ratePerSec > 0 && !math.IsInf(ratePerSec, 1) {
		floor = time.Duration(math.Ceil(MinWindowArrivals / ratePerSec * float64(time.Second)))
	}
	return max(slo, floor)
}

// RateMonitor measures per (session, module) arrival rates (InferLine's
// traffic envelope): each counter over its own sliding window (the session's
// EnvelopeWindow), reporting the rate of the latest window (Current), the
// highest window rate within the horizon (Envelope) and the mean over the
// horizon. The request path resolves a Counter once with Handle and then calls
// Counter.Add: one atomic load and one atomic add, no lock, no allocation. Time
// moves only when Advance (or Snapshot, or Run) is called: the owner calls it
// at least once per bucket; a late call is caught up (the buckets it skipped
// read as empty).
//
// Handle, Advance, Snapshot and Counter.Add may be called from any goroutine.
type RateMonitor struct {
	bucket  time.Duration
	horizon int // buckets
	n       int // ring length: the horizon, the open bucket and one spare
	start   time.Time

	cur atomic.Int64 // index of the open bucket since start

	mu       sync.Mutex // guards counters (Handle, Advance, Snapshot); not Add
	advMu    sync.Mutex // serialises Advance
	counters map[ModuleKey]*Counter
	list     atomic.Pointer[[]*Counter]
}

// Counter counts one (session, module)'s arrivals into the monitor's ring.
// Obtained from RateMonitor.Handle; valid for the monitor's lifetime.
type Counter struct {
	key  ModuleKey
	m    *RateMonitor
	span atomic.Int64 // the window, in buckets
	ring []atomic.Int64
	fan  atomic.Pointer[fanOutCounts] // a fan-out's parent items by items (HandleFanOut); nil for another module
}

// NewRateMonitor returns a monitor whose first bucket opens at start. Errors
// name a bucket or horizon that is not positive or not a multiple of the bucket.
func NewRateMonitor(start time.Time, o MonitorOptions) (*RateMonitor, error) {
	if o.Bucket == 0 {
		o.Bucket = 100 * time.Millisecond
	}
	if o.Bucket < 0 {
		return nil, fmt.Errorf("rate monitor: bucket %v: must be > 0", o.Bucket)
	}
	if o.Horizon == 0 {
		o.Horizon = DefaultHorizon
	}
	if o.Horizon < 0 || o.Horizon%o.Bucket != 0 {
		return nil, fmt.Errorf("rate monitor: horizon %v: must be a positive multiple of the bucket %v", o.Horizon, o.Bucket)
	}
	h := int(o.Horizon / o.Bucket)
	m := &RateMonitor{bucket: o.Bucket, horizon: h, n: h + 2, start: start, counters: map[ModuleKey]*Counter{}}
	m.list.Store(&[]*Counter{})
	return m, nil
}

// Horizon returns how far back the envelope looks.
func (m *RateMonitor) Horizon() time.Duration { return time.Duration(m.horizon) * m.bucket }

// Handle returns the counter of (session, module), creating it on first use,
// and sets its window (EnvelopeWindow of the session; rounded up to whole
// buckets, at least one, at most the horizon). A later call with another
// window (the session's SLO or rate changed) changes it for the next Snapshot;
// the counts are kept. Takes a lock: call it when a plan is loaded, not per
// request.
func (m *RateMonitor) Handle(session, module string, window time.Duration) *Counter {
	c := m.handle(session, module, window)
	c.fan.Store(nil) // no longer a fan-out's, if it was
	return c
}

// handle is Handle without dropping a fan-out's counts (HandleFanOut).
func (m *RateMonitor) handle(session, module string, window time.Duration) *Counter {
	span := min(max(int64((window+m.bucket-1)/m.bucket), 1), int64(m.horizon))
	k := ModuleKey{session, module}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.counters[k]; ok {
		c.span.Store(span)
		return c
	}
	c := &Counter{key: k, m: m, ring: make([]atomic.Int64, m.n)}
	c.span.Store(span)
	m.counters[k] = c
	l := append(append([]*Counter(nil), *m.list.Load()...), c)
	m.list.Store(&l)
	return c
}

// Add counts n arrivals in the open bucket. Lock-free and allocation-free.
func (c *Counter) Add(n int64) {
	i := c.m.cur.Load() % int64(len(c.ring))
	c.ring[i].Add(n)
}

// Key returns the counter's (session, module).
func (c *Counter) Key() ModuleKey { return c.key }

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
	for _, c := range list {
		if f := c.fan.Load(); f != nil {
			f.rotate(target)
		}
	}
	m.cur.Store(target)
}

// Snapshot advances to now and returns every counter's rates over the closed
// buckets: the latest window (Current), the highest window sliding one bucket
// at a time through the horizon (Envelope), and the mean over the horizon.
// Early on, what has been measured stands for the horizon and, when shorter
// than the window, for the window (at least one bucket), so the first rates
// appear after one bucket, undiluted by time not yet measured.
func (m *RateMonitor) Snapshot(now time.Time) RateSnapshot {
	m.Advance(now)
	cur := m.cur.Load()
	list := *m.list.Load()
	s := RateSnapshot{At: now, Horizon: m.Horizon(), Rates: make([]ModuleRate, 0, len(list))}
	closed := int(min(cur, int64(m.horizon)))
	for _, c := range list {
		span := int(c.span.Load())
		r := ModuleRate{Session: c.key.Session, Module: c.key.Module, Window: time.Duration(span) * m.bucket}
		if closed > 0 {
			recent := min(RecentWindows*span, closed)
			r.Current, r.Envelope, r.Mean, r.Recent = c.rates(cur, closed, min(span, closed), recent)
			r.RecentSpan = time.Duration(recent) * m.bucket
		}
		if f := c.fan.Load(); f != nil {
			r.FanOut = f.counts()
		}
		s.Rates = append(s.Rates, r)
	}
	sort.Slice(s.Rates, func(i, j int) bool {
		a, b := s.Rates[i], s.Rates[j]
		return a.Session < b.Session || a.Session == b.Session && a.Module < b.Module
	})
	return s
}

// rates walks the closed buckets before cur newest first, closed of them
// (≤ the horizon), with a window of span buckets (≤ closed), and returns the
// latest window's rate, the highest window rate, the mean and the rate over
// the latest recent buckets (span ≤ recent ≤ closed), in req/s. One pass:
// the window's sum slides by adding the older bucket and dropping the newer
// one.
func (c *Counter) rates(cur int64, closed, span, recent int) (current, envelope, mean, recentRate float64) {
	n := int64(len(c.ring))
	at := func(i int) int64 { return c.ring[(cur-1-int64(i))%n].Load() }
	var sum int64
	for i := range span {
		sum += at(i)
	}
	latest, total, peak, recentSum := sum, sum, sum, sum
	for i := span; i < closed; i++ {
		x := at(i)
		total += x
		if i < recent {
			recentSum = total
		}
		sum += x - at(i-span)
		peak = max(peak, sum)
	}
	b := c.m.bucket.Seconds()
	w := float64(span) * b
	return float64(latest) / w, float64(peak) / w, float64(total) / (float64(closed) * b), float64(recentSum) / (float64(recent) * b)
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

// RateSnapshot is the rates a monitor measured at At: JSON-ready, so a gateway can
// report it to a remote scheduler. Immutable once made.
type RateSnapshot struct {
	At      time.Time     `json:"at"`
	Horizon time.Duration `json:"horizon"`
	Rates   []ModuleRate  `json:"rates"`
}

// ModuleRate is one (session, module)'s measured arrival rate in req/s over
// its Window: Current over the latest window, Envelope the highest window
// within the horizon (≥ Current), Mean over the horizon. Recent is the rate
// over the latest RecentSpan: RecentWindows windows (at most the horizon, or
// what has been measured when that is shorter), long enough for the
// controller to judge whether a rise is significant (Options.UpSignificance):
// RecentWindows windows of at least MinWindowArrivals (100) arrivals hold at
// least 400, whose Poisson noise is at most 5%, half of one window's. 0 in
// snapshots from before the field. FanOut, on a fan-out module's rate
// (RateMonitor.HandleFanOut), is its parent items over the last one to two
// generations counted by the items each brought: weights are counts, not
// normalised (api.FanOut.Normalized makes them shares); nil for another
// module and in snapshots from before the field.
type ModuleRate struct {
	Session    string        `json:"session"`
	Module     string        `json:"module"`
	Window     time.Duration `json:"window"`
	Current    float64       `json:"current"`
	Envelope   float64       `json:"envelope"`
	Mean       float64       `json:"mean"`
	Recent     float64       `json:"recent,omitempty"`
	RecentSpan time.Duration `json:"recent_span,omitempty"`
	FanOut     api.FanOut    `json:"fanout,omitempty"`
}

// RefusedModule is the module name under which a gateway reports a
// session's requests refused by admission (module names are never empty):
// the modules after the sources see only the admitted requests' items, and
// cluster.ExpandRates scales their rates back to the demand by it.
const RefusedModule = ""

// RecentWindows is how many windows ModuleRate.Recent spans.
const RecentWindows = 4

// Scaled returns r with its rates multiplied by f: a module that sees f
// requests per request of the session's source, where the gateway did not
// count it (cluster.ExpandRates). Its
// RecentSpan is divided by f: the span over which a Poisson stream at the
// scaled rate has the scaled count's noise (f·√n for n source arrivals), so
// the significance of a rise is judged as at the source.
func (r ModuleRate) Scaled(f float64) ModuleRate {
	r.Current, r.Envelope, r.Mean, r.Recent = r.Current*f, r.Envelope*f, r.Mean*f, r.Recent*f
	if f > 0 {
		r.RecentSpan = time.Duration(float64(r.RecentSpan) / f)
	}
	return r
}

// Envelopes returns the envelope rate (req/s) of every key in s.
func (s RateSnapshot) Envelopes() map[ModuleKey]float64 {
	out := make(map[ModuleKey]float64, len(s.Rates))
	for _, r := range s.Rates {
		out[ModuleKey{r.Session, r.Module}] += r.Envelope
	}
	return out
}

// Current returns the rate (req/s) of every key in s over its latest window:
// what arrives now, without the envelope's memory of the horizon.
func (s RateSnapshot) Current() map[ModuleKey]float64 {
	out := make(map[ModuleKey]float64, len(s.Rates))
	for _, r := range s.Rates {
		out[ModuleKey{r.Session, r.Module}] += r.Current
	}
	return out
}

// Recent returns the rate (req/s) of every key in s over its RecentSpan,
// and that span (the longest where s lists a key twice).
func (s RateSnapshot) Recent() (map[ModuleKey]float64, map[ModuleKey]time.Duration) {
	rate := make(map[ModuleKey]float64, len(s.Rates))
	span := make(map[ModuleKey]time.Duration, len(s.Rates))
	for _, r := range s.Rates {
		k := ModuleKey{r.Session, r.Module}
		rate[k] += r.Recent
		span[k] = max(span[k], r.RecentSpan)
	}
	return rate, span
}

// Closed appends to dst the arrivals of the closed buckets after bucket
// after (exclusive), oldest first, and returns them with the index of the
// newest closed bucket (bucket i covers [start + i·bucket, start +
// (i+1)·bucket)). after < 0 starts at the newest closed bucket; buckets that
// left the ring (more than the horizon ago) are skipped. The Tuner reads a
// session's arrivals with it, bucket by bucket. Lock-free; counts of the
// newest closed bucket may still grow by an Add that raced the Advance.
func (c *Counter) Closed(after int64, dst []int64) ([]int64, int64) {
	newest := c.m.cur.Load() - 1
	if newest < 0 {
		return dst, after
	}
	from := max(after+1, newest-int64(c.m.horizon)+1)
	if after < 0 {
		from = newest
	}
	for i := from; i <= newest; i++ {
		dst = append(dst, c.ring[i%int64(len(c.ring))].Load())
	}
	return dst, newest
}

// Bucket returns the monitor's bucket length.
func (m *RateMonitor) Bucket() time.Duration { return m.bucket }
