package calibrate

import (
	"sort"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Colocation is a model's measured slowdown on a device it shares with
// other models against the same model alone on a device of its type
// (spatial multiplexing's interference, learned from the same series as the
// calibration): placement can avoid pairs whose slowdown exceeds what the
// plan allows.
type Colocation struct {
	SeriesKey
	// With are the other models the plan places on SeriesKey.Device, sorted.
	With []string
	// Shared is the model's estimate on SeriesKey.Device; Alone the largest
	// trusted estimate of the same entry on the devices the model has to
	// itself; Slowdown is Shared/Alone.
	Shared, Alone time.Duration
	Slowdown      float64
}

// Colocations returns, for placed (a plan with its backends), every trusted
// series of a model on a backend that the plan shares with another model,
// compared with the same entry on backends where the model is alone; entries
// with no trusted series alone are left out. Sorted by key. Control path.
func (e *Estimator) Colocations(placed *api.Plan) []Colocation {
	if placed == nil {
		return nil
	}
	models := map[string]map[string]bool{} // device -> models placed there
	for _, sp := range placed.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				for _, b := range g.Backends {
					if models[b] == nil {
						models[b] = map[string]bool{}
					}
					models[b][mp.Model] = true
				}
			}
		}
	}
	type entry struct {
		model, hardware string
		batch, conc     int
	}
	alone := map[entry]time.Duration{}
	var shared []Measured
	for _, m := range e.Snapshot() {
		on := models[m.Device]
		if !m.Trusted || !on[m.Model] {
			continue
		}
		if len(on) == 1 {
			k := entry{m.Model, m.Hardware, m.Batch, m.Concurrency}
			alone[k] = max(alone[k], m.Estimate)
		} else {
			shared = append(shared, m)
		}
	}
	var out []Colocation
	for _, m := range shared {
		a, ok := alone[entry{m.Model, m.Hardware, m.Batch, m.Concurrency}]
		if !ok || a <= 0 {
			continue
		}
		var with []string
		for o := range models[m.Device] {
			if o != m.Model {
				with = append(with, o)
			}
		}
		sort.Strings(with)
		out = append(out, Colocation{SeriesKey: m.SeriesKey, With: with, Shared: m.Estimate, Alone: a, Slowdown: float64(m.Estimate) / float64(a)})
	}
	return out
}
