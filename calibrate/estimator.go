package calibrate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// SeriesKey names one series: a model at one profiled batch size and concurrency on
// one device (backend id) of a hardware type.
type SeriesKey struct {
	Model       string `json:"model"`
	Hardware    string `json:"hardware"`
	Batch       int    `json:"batch"`
	Concurrency int    `json:"concurrency"`
	Device      string `json:"device"`
}

// String names the key as model@hardware/device b<batch>c<concurrency>.
func (k SeriesKey) String() string {
	return fmt.Sprintf("%s@%s/%s b%dc%d", k.Model, k.Hardware, k.Device, k.Batch, k.Concurrency)
}

// entryString names the key's profile entry, without its device, as
// model@hardware b<batch>c<concurrency>.
func (k SeriesKey) entryString() string {
	return fmt.Sprintf("%s@%s b%dc%d", k.Model, k.Hardware, k.Batch, k.Concurrency)
}

// Options configure an Estimator; zero fields take the defaults.
type Options struct {
	// Window is how many of a series' latest batches it keeps (default 64).
	Window int
	// Quantile is the quantile of the window taken as the estimate, in
	// (0, 1] (default 0.9).
	Quantile float64
	// MinSamples is how many batches a series needs before its estimate is
	// trusted (default 10), in [1, Window].
	MinSamples int
	// Recent is how old a series' last batch may be for Drift to count it
	// (default 2s, under the control loop's drift hold): a device the plan
	// no longer uses does not re-plan, and a drift must be measured anew
	// through a hold, not read again from a window a burst left.
	Recent time.Duration
	// Forget is how old a series' last batch may be for the Estimator to
	// keep it at all (default 10s): a slowdown no longer measured (a batch
	// size only a burst filled, a device left idle) is forgotten, its
	// entries back to the other measurements' or the profile's
	// (docs/calibration.md, "Forgetting"). A series only loaded (Unmarshal)
	// has no time and is kept until measured.
	Forget time.Duration
	// MaxAge is how much older than its series' latest batch a sample may
	// be and still count, while at least MinSamples samples are newer
	// (default 5s): at a few batches a second the estimate is what the
	// device does now, not a slowdown of a minute ago that the window
	// still holds; a series with fewer newer samples takes its latest
	// MinSamples.
	MaxAge time.Duration
}

// Defaults of Options.
const (
	DefaultWindow     = 64
	DefaultQuantile   = 0.9
	DefaultMinSamples = 10
	DefaultRecent     = 2 * time.Second
	DefaultForget     = 10 * time.Second
	DefaultMaxAge     = 5 * time.Second
)

func (o *Options) defaults() error {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Quantile == 0 {
		o.Quantile = DefaultQuantile
	}
	if o.MinSamples == 0 {
		o.MinSamples = DefaultMinSamples
	}
	if o.Recent == 0 {
		o.Recent = DefaultRecent
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Forget == 0 {
		o.Forget = max(DefaultForget, o.Recent)
	}
	if o.Window < 1 || o.Window > 1<<16 || !(o.Quantile > 0 && o.Quantile <= 1) || o.MinSamples < 1 || o.MinSamples > o.Window || o.Recent < 0 || o.MaxAge < 0 || o.Forget < o.Recent {
		return fmt.Errorf("calibrate: window %d, quantile %v, min samples %d, recent %v, max age %v, forget %v: want 1 ≤ window ≤ 65536, 0 < quantile ≤ 1, 1 ≤ min samples ≤ window, recent ≥ 0, max age ≥ 0, forget ≥ recent",
			o.Window, o.Quantile, o.MinSamples, o.Recent, o.MaxAge, o.Forget)
	}
	return nil
}

// Estimator is the online estimate of every series. Safe from any goroutine.
type Estimator struct {
	o Options

	mu     sync.Mutex
	series map[SeriesKey]*series
	latest time.Time // the newest Observe's time: Snapshot's now

	offline atomic.Pointer[index]
}

// series is one SeriesKey's window: a ring of the latest durations.
type series struct {
	d     []time.Duration // len ≤ Window; ring once full
	at    []int64         // unix ns each sample of d was observed (0: loaded)
	next  int             // where the next sample goes once full
	total uint64          // batches ever observed (persisted ones included)
	last  time.Time       // the latest Observe (zero for a series only loaded)
}

// New returns an Estimator; the error names an option out of range.
func New(o Options) (*Estimator, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return &Estimator{o: o, series: map[SeriesKey]*series{}}, nil
}

// Options returns the options in force (defaults filled in).
func (e *Estimator) Options() Options { return e.o }

// index is the offline profiles by model, hardware and concurrency: the
// entries' batch sizes and durations, sorted by batch.
type index map[profKey][]api.ProfileEntry

type profKey struct {
	model, hardware string
	concurrency     int
}

func conc(c int) int { return max(c, 1) }

func newIndex(cfg *api.Config) index {
	ix := index{}
	if cfg == nil {
		return ix
	}
	for _, p := range cfg.Profiles {
		for _, en := range p.Entries {
			k := profKey{p.Model, p.Hardware, conc(en.Concurrency)}
			ix[k] = append(ix[k], en)
		}
	}
	for _, es := range ix {
		sort.Slice(es, func(i, j int) bool { return es[i].Batch < es[j].Batch })
	}
	return ix
}

// entry returns the profile entry that covers a batch of n items, the
// smallest profiled batch ≥ n at concurrency c, and how much longer than a
// batch of n that entry's batch is profiled to run (its duration over
// api.DurationAt's for n, ≥ 1; 1 at the entry's own batch): a partial batch
// measured at t counts as t × scale at the entry (ok false: none covers n).
func (ix index) entry(model, hardware string, n, c int) (en api.ProfileEntry, scale float64, ok bool) {
	es := ix[profKey{model, hardware, conc(c)}]
	for _, e := range es {
		if e.Batch >= n {
			en, ok = e, true
			break
		}
	}
	if !ok {
		return en, 1, false
	}
	scale = 1
	if en.Batch > n {
		if d, ok := api.DurationAt(es, c, float64(n)); ok && d > 0 && en.Duration.D() > d {
			scale = float64(en.Duration.D()) / float64(d)
		}
	}
	return en, scale, true
}

// SetOffline gives the Estimator the offline (configured) profiles: Observe
// counts a batch at the entry that covers it, and Snapshot reports each
// series' profiled duration. Call it with every config made live, before the
// plan's batches run.
func (e *Estimator) SetOffline(cfg *api.Config) { e.offline.Store(ptr(newIndex(cfg))) }

func ptr[T any](v T) *T { return &v }

// Observe records that a batch of n items of model, on device (a backend id)
// of hardware loaded at concurrency c, took took (the call's duration, not
// counting a wait behind other batches). A batch no profile entry covers is
// counted at n. Called once per batch, never per request.
func (e *Estimator) Observe(model, hardware, device string, n, c int, took time.Duration, at time.Time) {
	if took <= 0 || n <= 0 {
		return
	}
	if ix := e.offline.Load(); ix != nil {
		if en, scale, ok := ix.entry(model, hardware, n, c); ok {
			n, took = en.Batch, time.Duration(float64(took)*scale)
		}
	}
	k := SeriesKey{Model: model, Hardware: hardware, Batch: n, Concurrency: conc(c), Device: device}
	e.mu.Lock()
	s := e.series[k]
	if s == nil {
		s = newSeries(e.o.Window)
		e.series[k] = s
	}
	s.add(took, at.UnixNano(), e.o.Window)
	s.last = at
	if at.After(e.latest) {
		e.latest = at
	}
	e.mu.Unlock()
}

func newSeries(window int) *series {
	return &series{d: make([]time.Duration, 0, window), at: make([]int64, 0, window)}
}

func (s *series) add(d time.Duration, at int64, window int) {
	s.total++
	if len(s.d) < window {
		s.d = append(s.d, d)
		s.at = append(s.at, at)
		return
	}
	s.d[s.next] = d
	s.at[s.next] = at
	s.next = (s.next + 1) % len(s.d)
}

// counted appends to buf the samples of s that its estimate reads: those
// observed within maxAge of its latest batch when there are at least
// minSamples of them, else its latest minSamples (every sample of a series
// only loaded). O(Window); the caller holds the Estimator's lock.
func (s *series) counted(buf []time.Duration, minSamples int, maxAge time.Duration) []time.Duration {
	n := len(s.d)
	if s.last.IsZero() || n <= minSamples {
		return append(buf, s.d...)
	}
	from := s.last.UnixNano() - int64(maxAge)
	fresh := 0
	for _, at := range s.at {
		if at >= from {
			fresh++
		}
	}
	if fresh >= minSamples {
		for i, at := range s.at {
			if at >= from {
				buf = append(buf, s.d[i])
			}
		}
		return buf
	}
	for i := range minSamples { // the newest: just before next on a full ring, the end of a filling one
		buf = append(buf, s.d[((s.next-1-i)%n+n)%n])
	}
	return buf
}

// forgetLocked drops the series whose latest batch is more than Forget
// before now (series only loaded stay). The caller holds the lock.
func (e *Estimator) forgetLocked(now time.Time) {
	for k, s := range e.series {
		if !s.last.IsZero() && now.Sub(s.last) > e.o.Forget {
			delete(e.series, k)
		}
	}
}

// quantile returns the q-quantile of ds (nearest rank, the sample at
// ⌈q·n⌉); ds is sorted in place.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Measured is one series as the Estimator sees it now.
type Measured struct {
	SeriesKey
	// Estimate is the quantile of the window's samples that count (those
	// within MaxAge of its latest batch, or its latest MinSamples); Samples how many batches the window
	// holds (Total: ever observed); Trusted whether Samples ≥ MinSamples.
	Estimate time.Duration
	Samples  int
	Total    uint64
	Trusted  bool
	// Profiled is the offline profile's duration at the key's entry (0: no
	// such entry); Ratio is Estimate/Profiled (0 without a profile).
	Profiled time.Duration
	Ratio    float64
	// Last is when the series last observed a batch (zero: only loaded).
	Last time.Time
}

// Snapshot returns every series, sorted by key, after forgetting those not
// observed within Forget of the newest batch the Estimator has seen.
// O(series × Window log Window); the control path's.
func (e *Estimator) Snapshot() []Measured {
	ix := e.offline.Load()
	e.mu.Lock()
	e.forgetLocked(e.latest)
	out := make([]Measured, 0, len(e.series))
	buf := make([]time.Duration, 0, e.o.Window)
	for k, s := range e.series {
		buf = s.counted(buf[:0], e.o.MinSamples, e.o.MaxAge)
		m := Measured{SeriesKey: k, Estimate: quantile(buf, e.o.Quantile), Samples: len(s.d), Total: s.total, Last: s.last}
		m.Trusted = m.Samples >= e.o.MinSamples
		if ix != nil {
			if en, _, ok := ix.entry(k.Model, k.Hardware, k.Batch, k.Concurrency); ok && en.Batch == k.Batch {
				m.Profiled = en.Duration.D()
				m.Ratio = float64(m.Estimate) / float64(m.Profiled)
			}
		}
		out = append(out, m)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].SeriesKey.less(out[j].SeriesKey) })
	return out
}

func (k SeriesKey) less(o SeriesKey) bool {
	if k.Model != o.Model {
		return k.Model < o.Model
	}
	if k.Hardware != o.Hardware {
		return k.Hardware < o.Hardware
	}
	if k.Device != o.Device {
		return k.Device < o.Device
	}
	if k.Batch != o.Batch {
		return k.Batch < o.Batch
	}
	return k.Concurrency < o.Concurrency
}
