package calibrate

import (
	"math"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// entryKey is a profile entry: a model at one batch and concurrency on a
// hardware type (a Key without its device).
type entryKey struct {
	model, hardware string
	batch, conc     int
}

// table is the trusted estimates folded over devices: by entry, the largest
// estimate over the devices of the type, and whether some device measured
// it within Recent of now.
type table struct {
	est    map[entryKey]time.Duration
	recent map[entryKey]bool
}

func (e *Estimator) table(now time.Time) table {
	t := table{est: map[entryKey]time.Duration{}, recent: map[entryKey]bool{}}
	for _, m := range e.Snapshot() {
		if !m.Trusted {
			continue
		}
		k := entryKey{m.Model, m.Hardware, m.Batch, m.Concurrency}
		t.est[k] = max(t.est[k], m.Estimate)
		if !m.Last.IsZero() && now.Sub(m.Last) <= e.o.Recent {
			t.recent[k] = true
		}
	}
	return t
}

// Bounds on a ratio of measured to profiled duration that Calibrate applies
// to an unmeasured entry: a profile may be pessimistic, within reason, and a
// device stalled by its host must not make every plan infeasible.
const (
	minRatio = 0.5
	maxRatio = 10
)

// Calibrate returns a copy of cfg whose profiles are the calibrated ones
// (see the package doc): measured entries take the largest trusted estimate
// over the devices of their type; the other entries of a measured model on
// that type are scaled by the model's largest measured ratio, else by the
// type's largest ratio over its models, within [0.5, 10]. cfg itself is not
// modified; with nothing trusted, Calibrate returns cfg.
func (e *Estimator) Calibrate(cfg *api.Config, now time.Time) *api.Config {
	if cfg == nil {
		return nil
	}
	t := e.table(now)
	if len(t.est) == 0 {
		return cfg
	}
	ratio, hwRatio := map[[2]string]float64{}, map[string]float64{}
	for _, p := range cfg.Profiles {
		for _, en := range p.Entries {
			d, ok := t.est[entryKey{p.Model, p.Hardware, en.Batch, conc(en.Concurrency)}]
			if !ok || en.Duration <= 0 {
				continue
			}
			r := float64(d) / float64(en.Duration)
			mk := [2]string{p.Model, p.Hardware}
			ratio[mk] = max(ratio[mk], r)
			hwRatio[p.Hardware] = max(hwRatio[p.Hardware], r)
		}
	}
	out := *cfg
	out.Profiles = make([]api.Profile, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		p.Entries = append([]api.ProfileEntry(nil), p.Entries...)
		r, ok := ratio[[2]string{p.Model, p.Hardware}]
		if !ok {
			r, ok = hwRatio[p.Hardware]
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

// Drift compares the calibrated durations now with assumed, the profiles a
// plan was made from (the Calibrate output the planner saw, or the offline
// config when calibration was off): over the entries some device measured
// within Options.Recent, it returns the one whose measured/assumed ratio is
// farthest from 1, and that ratio (1 and ok false when no entry counts).
// Drift over a threshold for a hold is the control loop's cause "drift".
func (e *Estimator) Drift(assumed *api.Config, now time.Time) (worst float64, at Key, ok bool) {
	if assumed == nil {
		return 1, Key{}, false
	}
	t := e.table(now)
	worst = 1
	for _, p := range assumed.Profiles {
		for _, en := range p.Entries {
			k := entryKey{p.Model, p.Hardware, en.Batch, conc(en.Concurrency)}
			if !t.recent[k] || en.Duration <= 0 {
				continue
			}
			r := float64(t.est[k]) / float64(en.Duration)
			if !ok || math.Abs(math.Log(r)) > math.Abs(math.Log(worst)) {
				worst, at, ok = r, Key{Model: p.Model, Hardware: p.Hardware, Batch: en.Batch, Concurrency: k.conc}, true
			}
		}
	}
	return worst, at, ok
}
