package calibrate

import (
	"math"
	"slices"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// entryKey is a profile entry: a model at one batch and concurrency on a
// hardware type (a SeriesKey without its device).
type entryKey struct {
	model, hardware string
	batch, conc     int
}

// table is the trusted estimates folded over devices, for the offline
// profiles ix: by entry, the lower median of the devices' estimates; by model
// and type, the lower median over devices of the device's pooled ratio
// (the quantile of the model's samples on the device over their entries'
// profiled durations, at the batch sizes from half the largest measured
// there up: a small batch's fixed overhead is a larger share of its
// duration; trusted from MinSamples samples); and which models some device
// measured within Recent of now.
type table struct {
	est    map[entryKey]time.Duration
	ratio  map[[2]string]float64
	recent map[[2]string]bool
	fresh  map[entryKey]bool // entries some device measured within Recent
}

func (e *Estimator) table(ix index, now time.Time) table {
	t := table{est: map[entryKey]time.Duration{}, ratio: map[[2]string]float64{}, recent: map[[2]string]bool{}, fresh: map[entryKey]bool{}}
	ests := map[entryKey][]time.Duration{}
	ratios := map[[2]string][]float64{}
	type devKey struct{ model, hardware, device string }
	type sample struct {
		batch int
		ratio float64
	}
	pooled, big := map[devKey][]sample{}, map[devKey]int{}
	buf := make([]time.Duration, 0, e.o.Window)
	e.mu.Lock()
	e.forgetLocked(now)
	for k, s := range e.series {
		mk := [2]string{k.Model, k.Hardware}
		buf = s.counted(buf[:0], e.o.MinSamples, e.o.MaxAge)
		if len(s.d) >= e.o.MinSamples {
			ek := entryKey{k.Model, k.Hardware, k.Batch, k.Concurrency}
			ests[ek] = append(ests[ek], quantile(buf, e.o.Quantile))
		}
		if !s.last.IsZero() && now.Sub(s.last) <= e.o.Recent {
			t.recent[mk] = true
			t.fresh[entryKey{k.Model, k.Hardware, k.Batch, k.Concurrency}] = true
		}
		en, _, ok := ix.entry(k.Model, k.Hardware, k.Batch, k.Concurrency)
		if !ok || en.Batch != k.Batch || en.Duration <= 0 {
			continue
		}
		dk := devKey{k.Model, k.Hardware, k.Device}
		big[dk] = max(big[dk], k.Batch)
		for _, d := range buf {
			pooled[dk] = append(pooled[dk], sample{k.Batch, float64(d) / float64(en.Duration)})
		}
	}
	e.mu.Unlock()
	var rs []float64
	for dk, ss := range pooled {
		rs = rs[:0]
		for _, s := range ss {
			if 2*s.batch >= big[dk] {
				rs = append(rs, s.ratio)
			}
		}
		if len(rs) < e.o.MinSamples {
			continue
		}
		slices.Sort(rs)
		r := rs[min(max(int(math.Ceil(e.o.Quantile*float64(len(rs))))-1, 0), len(rs)-1)]
		mk := [2]string{dk.model, dk.hardware}
		ratios[mk] = append(ratios[mk], r)
	}
	for k, ds := range ests {
		t.est[k] = lowerMedian(ds)
	}
	for k, rs := range ratios {
		t.ratio[k] = lowerMedian(rs)
	}
	return t
}

// lowerMedian returns the lower median of xs (sorted in place): the typical
// device of a type, so that one slow device does not set the profile of all
// (it is the straggler measure's: docs/calibration.md).
func lowerMedian[T int64 | float64 | time.Duration](xs []T) T {
	slices.Sort(xs)
	return xs[(len(xs)-1)/2]
}

// Bounds on a ratio of measured to profiled duration that Calibrate applies
// to an unmeasured entry: a profile may be pessimistic, within reason, and a
// device stalled by its host must not make every plan infeasible.
const (
	minRatio = 0.5
	maxRatio = 10
)

// Calibrate returns a copy of offline (the configured profiles) whose
// profiles are the calibrated ones (see the package doc): an entry with a
// trusted series takes the lower median of its devices' estimates; the
// other entries of a measured model on that type are scaled by the model's
// ratio there (the lower median over devices of a device's pooled quantile), else
// by the type's largest ratio over its models, else (a type nothing measured)
// by the smallest ratio of the measured types but at least 1 (a slowdown is
// carried over, a speed-up is not), within [0.5, 10]. offline
// itself is not modified; with nothing trusted, Calibrate returns offline.
func (e *Estimator) Calibrate(offline *api.Config, now time.Time) *api.Config {
	if offline == nil {
		return nil
	}
	return e.calibrate(offline, e.table(newIndex(offline), now))
}

func (e *Estimator) calibrate(offline *api.Config, t table) *api.Config {
	if len(t.est) == 0 && len(t.ratio) == 0 {
		return offline
	}
	hwRatio := map[string]float64{}
	for mk, r := range t.ratio {
		hwRatio[mk[1]] = max(hwRatio[mk[1]], r)
	}
	// A type nothing measured yet takes the smallest ratio of the measured
	// types: a slowdown every measured type shows (the host's, the
	// inputs') is likely its too, and an unmeasured type that looks faster
	// than it is draws the whole plan onto the devices of that type (seen:
	// every device 1.6× slower, the first drift plan moved m2 from the
	// measured t4 to the unmeasured v100 and needed 10 v100 of 6).
	// Only a slowdown is carried over (the ratio is at least 1): a type
	// measured faster than profiled (ocr-pre's batch of 2 on cpu-builtin,
	// at the 0.5 floor) says its profile was pessimistic, nothing about
	// another type; carried over, it halved the T4's profiles, drew the
	// paper's chain onto the T4 the demo does not start, and the plan on
	// the V100 it has fell back to a dearer split.
	anyRatio := 0.0
	for _, r := range hwRatio {
		if anyRatio == 0 || r < anyRatio {
			anyRatio = r
		}
	}
	if anyRatio > 0 {
		anyRatio = max(anyRatio, 1)
	}
	out := *offline
	out.Profiles = make([]api.Profile, len(offline.Profiles))
	for i, p := range offline.Profiles {
		p.Entries = append([]api.ProfileEntry(nil), p.Entries...)
		r, ok := t.ratio[[2]string{p.Model, p.Hardware}]
		if !ok {
			r, ok = hwRatio[p.Hardware]
		}
		if !ok && anyRatio > 0 {
			r, ok = anyRatio, true
		}
		r = min(max(r, minRatio), maxRatio)
		for j := range p.Entries {
			en := &p.Entries[j]
			if d, measured := t.est[entryKey{p.Model, p.Hardware, en.Batch, conc(en.Concurrency)}]; measured {
				en.Duration = api.Duration(d)
			} else if ok {
				en.Duration = api.Duration(math.Round(float64(en.Duration) * r))
			}
		}
		out.Profiles[i] = p
	}
	return &out
}

// DriftFloor is the smallest change Drift counts: a group's batch duration
// moving by at least this share of its module's budget (its latency), or by
// a relative change that, times the group's machines, is at least this many
// machines (its capacity). Without it the millisecond steps of the demo's
// OCR chain (ocr-pre at 10 ms on a few hundredths of a machine, a budget of
// hundreds of ms) swung between 0.8× and 1.2× with the host's scheduling and
// re-planned every session 16 times in two minutes, each swap costing the
// paper chain late and refused requests.
const DriftFloor = 0.05

// Drift compares the calibrated profiles now (Calibrate(offline)) with what
// plan assumed: over plan's groups whose model some device of the group's
// hardware measured within Options.Recent (and whose entry, when its own
// trusted series set it, one of them did), it returns the group's entry whose
// calibrated/planned duration ratio is farthest from 1 (on a log scale, so
// 1.25 and 0.8 weigh the same), and that ratio; ok is false (ratio 1) when no
// group counts; at names the entry ("m2@t4 b4c1"). Only the entries the plan runs count: a partial batch's
// entry may carry more overhead without the plan's being wrong. Drift beyond
// a threshold for a hold is the control loop's cause "drift".
func (e *Estimator) Drift(offline *api.Config, plan *api.Plan, now time.Time) (worst float64, at string, ok bool) {
	return e.drift(offline, plan, now, false)
}

// DriftSlower is Drift over the entries measured slower than planned only
// (ratio > 1), for a controller that holds a drift to faster longer than
// one to slower: an entry 0.5× must not hide another 1.3×.
func (e *Estimator) DriftSlower(offline *api.Config, plan *api.Plan, now time.Time) (worst float64, at string, ok bool) {
	return e.drift(offline, plan, now, true)
}

func (e *Estimator) drift(offline *api.Config, plan *api.Plan, now time.Time, slowerOnly bool) (worst float64, at string, ok bool) {
	worst = 1
	if offline == nil || plan == nil {
		return worst, "", false
	}
	t := e.table(newIndex(offline), now)
	cal := newIndex(e.calibrate(offline, t))
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				if !t.recent[[2]string{mp.Model, g.Hardware}] || g.DurationMs <= 0 {
					continue
				}
				c, _, found := cal.entry(mp.Model, g.Hardware, g.Batch, g.Concurrency)
				if !found || c.Batch != g.Batch {
					continue
				}
				if ek := (entryKey{mp.Model, g.Hardware, c.Batch, conc(g.Concurrency)}); t.est[ek] > 0 && !t.fresh[ek] {
					continue // its own series say it, and none measured it lately: a window a burst left is not read again
				}
				measured := c.Duration.D().Seconds() * 1000
				if change := math.Abs(measured - g.DurationMs); change < DriftFloor*mp.BudgetMs && change/g.DurationMs*g.Machines < DriftFloor {
					continue // moves neither the module's latency nor its machines by a twentieth
				}
				r := measured / g.DurationMs
				if slowerOnly && r <= 1 {
					continue
				}
				if !ok || math.Abs(math.Log(r)) > math.Abs(math.Log(worst)) {
					worst, at, ok = r, SeriesKey{Model: mp.Model, Hardware: g.Hardware, Batch: g.Batch, Concurrency: conc(g.Concurrency)}.entryString(), true
				}
			}
		}
	}
	return worst, at, ok
}
