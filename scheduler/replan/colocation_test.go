package replan

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
)

// colocConfig is controlConfig with a second module, b after a, of another
// model (m2, the same profile) at rateB: a's last, fractional machine and
// b's are packed on one device.
func colocConfig(rateA, rateB float64) *api.Config {
	cfg := controlConfig(rateA, time.Second)
	p := cfg.Profiles[0]
	p.Model = "m2"
	cfg.Profiles = append(cfg.Profiles, p)
	cfg.Sessions[0].Modules = append(cfg.Sessions[0].Modules, api.Module{Name: "b", Model: "m2", Rate: rateB, After: []string{"a"}})
	return cfg
}

// backendsOf maps each model of placed to its backends.
func backendsOf(placed *api.Plan) map[string][]string {
	out := map[string][]string{}
	for m := range placed.Machines() {
		out[m.Module.Model] = append(out[m.Module.Model], m.Backend)
	}
	return out
}

func shared(placed *api.Plan) []string {
	on := map[string]map[string]bool{}
	for m := range placed.Machines() {
		if on[m.Backend] == nil {
			on[m.Backend] = map[string]bool{}
		}
		on[m.Backend][m.Module.Model] = true
	}
	var out []string
	for id, ms := range on {
		if len(ms) > 1 {
			out = append(out, id)
		}
	}
	return out
}

// colocSetup starts a harness on colocConfig(1000, 150) over n v100
// devices with a real estimator; m's group, its shared device (with m2) and
// a batch() that observes m at its plan's duration on every device of the
// group, slow× on the shared one.
func colocSetup(t *testing.T, n int, slow float64) (*harness, func()) {
	t.Helper()
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, colocConfig(1000, 150), pool("v100", n), Options{Calibration: est, DriftHold: 2 * time.Second})
	first := h.last()
	sh := shared(first.Plan)
	if len(sh) != 1 {
		t.Fatalf("initial placement %v shares %v; want m's fraction and m2 on one device", backendsOf(first.Plan), sh)
	}
	g := first.Plan.Sessions[0].Modules[0].Configs[0]
	profiled := time.Duration(g.DurationMs * float64(time.Millisecond))
	batch := func() {
		for _, id := range g.Backends {
			d := profiled
			if id == sh[0] {
				d = time.Duration(slow * float64(profiled))
			}
			est.Observe("m", "v100", id, g.Batch, g.Concurrency, d, h.now)
		}
	}
	return h, batch
}

// TestControllerColocationSeparatesPair is cause "colocation" on a fake
// clock with a real calibrate.Estimator: m runs on a device of its own at
// its profile and on the device it shares with m2 1.5× slower. Once both
// series are trusted and the slowdown has held DriftHold, the controller
// re-plans and places m's fraction and m2 on different devices (a spare
// takes one); then it holds still. A slowdown within the threshold (1.05×)
// changes nothing.
func TestControllerColocationSeparatesPair(t *testing.T) {
	for _, c := range []struct {
		name     string
		slow     float64
		separate bool
	}{
		{"1.5x", 1.5, true},
		{"1.05x", 1.05, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, batch := colocSetup(t, 4, c.slow)
			for range 12 {
				batch()
			}
			h.run(1, noisy(1000)) // seen: the hold starts
			if len(h.published) != 1 {
				t.Fatalf("re-planned before the hold: %v", causes(h.published))
			}
			h.run(3, noisy(1000))
			if !c.separate {
				if len(h.published) != 1 {
					t.Fatalf("re-planned on a slowdown within the threshold: %v", causes(h.published))
				}
				return
			}
			if len(h.published) != 2 || h.last().Cause != CauseColocation {
				t.Fatalf("published %v; want initial, colocation", causes(h.published))
			}
			r := h.last()
			if sh := shared(r.Plan); len(sh) != 0 {
				t.Errorf("colocation plan %v still shares %v", backendsOf(r.Plan), sh)
			}
			if r.Shortfall.Interfering != 0 || r.Shortfall.Missing() != 0 {
				t.Errorf("colocation plan's shortfall %+v; want none with a spare listed", r.Shortfall)
			}
			for range 20 {
				batch()
			}
			h.run(10, noisy(1000))
			if len(h.published) != 2 {
				t.Errorf("re-planned again with the pair apart: %v", causes(h.published))
			}
		})
	}
}

// With no spare device the pair stays packed (placement's fallback) and
// the controller does not re-plan again and again for it.
func TestControllerColocationNoSpareHoldsStill(t *testing.T) {
	h, batch := colocSetup(t, 2, 2)
	for range 12 {
		batch()
	}
	h.run(15, noisy(1000))
	if n := h.c.Status().Unchanged; len(h.published) != 1 || n != 1 {
		t.Errorf("published %v, unchanged %d; want the initial plan only and one colocation re-plan that changed nothing", causes(h.published), n)
	}
	if sh := shared(h.last().Plan); len(sh) != 1 {
		t.Errorf("placement %v: want the pair still packed on the only other device", backendsOf(h.last().Plan))
	}
}
