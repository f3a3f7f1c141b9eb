package replan

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/placement"
)

var _ Calibration = (*calibrate.Estimator)(nil)

// TestControllerDriftReplans is cause "drift" on a fake clock: the one
// module's device runs 1.3× its profile; once the calibration trusts that
// (10 batches) and the drift has held DriftHold, the controller re-plans from
// the calibrated profiles (more machines, the plan's durations the measured
// ones), and then holds still while the device stays as measured. A drift
// within the threshold never re-plans.
func TestControllerDriftReplans(t *testing.T) {
	for _, c := range []struct {
		name   string
		slow   float64
		replan bool
	}{
		{"1.3x", 1.3, true},
		{"1.05x", 1.05, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			est, err := calibrate.New(calibrate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := controlConfig(4000, time.Second)
			h := newHarness(t, cfg, []placement.Member{{ID: "gpu-0", Hardware: "v100"}}, Options{Calibration: est, DriftHold: 2 * time.Second})
			first := h.last()
			g := first.Plan.Sessions[0].Modules[0].Configs[0]
			profiled := time.Duration(g.DurationMs * float64(time.Millisecond))
			batch := func() {
				est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, time.Duration(c.slow*float64(profiled)), h.now)
			}
			for range 9 { // not trusted yet
				batch()
			}
			h.run(5, noisy(4000))
			if len(h.published) != 1 {
				t.Fatalf("re-planned on 9 batches: %v", causes(h.published))
			}
			batch()
			h.run(1, noisy(4000)) // drift seen: the hold starts
			if len(h.published) != 1 {
				t.Fatalf("re-planned before the hold: %v", causes(h.published))
			}
			for range 3 { // measured through the hold (calibrate.Options.Recent)
				batch()
				h.run(1, noisy(4000))
			}
			if !c.replan {
				if len(h.published) != 1 {
					t.Fatalf("re-planned on a drift within the threshold: %v", causes(h.published))
				}
				return
			}
			if len(h.published) != 2 || h.last().Cause != CauseDrift {
				t.Fatalf("published %v; want initial, drift", causes(h.published))
			}
			r := h.last()
			ng := r.Plan.Sessions[0].Modules[0].Configs[0]
			if ng.Batch == g.Batch && ng.DurationMs < 1.29*g.DurationMs {
				t.Errorf("drift plan's group b%d %.1fms; want the measured %.1fms", ng.Batch, ng.DurationMs, 1.3*g.DurationMs)
			}
			if r.Unplaced.TotalCost <= first.Unplaced.TotalCost*1.2 {
				t.Errorf("drift plan costs %.2f, the offline one %.2f: a 1.3× slower device needs about 1.3× the machines", r.Unplaced.TotalCost, first.Unplaced.TotalCost)
			}
			for range 20 {
				batch()
			}
			h.run(10, noisy(4000))
			if len(h.published) != 2 {
				t.Errorf("re-planned again with the device as measured: %v", causes(h.published))
			}
		})
	}
}

// TestControllerRateRiseBeyondPoolKeepsPlanThatFits: a rate rise whose plan
// needs more devices than the pool has is not published while the current
// plan fits (admission refuses the excess instead of shared devices failing
// it late); a config change still is.
func TestControllerRateRiseBeyondPoolKeepsPlanThatFits(t *testing.T) {
	h := newHarness(t, controlConfig(400, time.Second), []placement.Member{{ID: "gpu-0", Hardware: "v100"}}, Options{})
	h.run(5, noisy(400))
	h.run(10, noisy(1000)) // 1.6 machines: one device is not enough
	keptBackThenConfig(t, h, "rate")
}

// keptBackThenConfig checks that h published its initial plan only, the
// re-plan of cause kept back counted as unchanged, and that a config change
// is then published all the same.
func keptBackThenConfig(t *testing.T, h *harness, cause string) {
	t.Helper()
	if len(h.published) != 1 {
		t.Fatalf("published %v; want the initial plan only (the %s plan needs more than the one device)", causes(h.published), cause)
	}
	if h.c.Status().Unchanged == 0 {
		t.Errorf("the %s re-plan kept back is not counted as unchanged", cause)
	}
	h.c.SetConfig(controlConfig(300, time.Second))
	h.run(1, noisy(300))
	if len(h.published) != 2 || h.last().Cause != CauseConfig {
		t.Errorf("published %v; want initial, config", causes(h.published))
	}
}

// blinking is a Calibration whose Drift has nothing to judge while blind.
type blinking struct {
	Calibration
	blind bool
}

func (b *blinking) Drift(offline *api.Config, plan *api.Plan, now time.Time) (float64, string, bool) {
	if b.blind {
		return 1, "", false
	}
	return b.Calibration.Drift(offline, plan, now)
}

// TestControllerDriftHoldSurvivesATickWithNothingMeasured: a tick at which
// the calibration has none of the plan's entries to compare (Drift's ok
// false) neither fires nor restarts the drift hold: the re-plan comes
// DriftHold after the drift was first seen, as without the blind tick.
func TestControllerDriftHoldSurvivesATickWithNothingMeasured(t *testing.T) {
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cal := &blinking{Calibration: est}
	cfg := controlConfig(4000, time.Second)
	h := newHarness(t, cfg, []placement.Member{{ID: "gpu-0", Hardware: "v100"}}, Options{Calibration: cal, DriftHold: 3 * time.Second})
	g := h.last().Plan.Sessions[0].Modules[0].Configs[0]
	profiled := time.Duration(g.DurationMs * float64(time.Millisecond))
	for range 10 {
		est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, time.Duration(1.3*float64(profiled)), h.now)
	}
	batch := func() {
		est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, time.Duration(1.3*float64(profiled)), h.now)
	}
	h.run(1, noisy(4000)) // drift seen: the hold starts
	cal.blind = true
	batch()
	h.run(1, noisy(4000))
	cal.blind = false
	for range 2 {
		batch()
		h.run(1, noisy(4000))
	}
	if len(h.published) != 2 || h.last().Cause != CauseDrift {
		t.Fatalf("3 s after the drift was seen, one blind tick among them: published %v; want the initial plan and a drift re-plan", causes(h.published))
	}
}

// TestControllerDriftKeepsASessionItCannotPlan: the one module's device
// measured 10× its profile makes the session infeasible on the calibrated
// profiles (a batch of 60 ms against an SLO of 30 ms). The drift re-plan
// keeps serving the session's last plan, so that admission refuses what the
// device cannot finish in time (429), instead of a plan without it, which
// answered every request 503 ("no plan"; the demo's OCR sessions on a host
// at load average 14).
func TestControllerDriftKeepsASessionItCannotPlan(t *testing.T) {
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, controlConfig(40, 30*time.Millisecond), []placement.Member{{ID: "gpu-0", Hardware: "v100"}}, Options{Calibration: est, DriftHold: 2 * time.Second})
	first := h.last()
	if first.Plan.Sessions[0].Error != "" {
		t.Fatalf("initial plan: %s", first.Plan.Sessions[0].Error)
	}
	g := first.Plan.Sessions[0].Modules[0].Configs[0]
	profiled := time.Duration(g.DurationMs * float64(time.Millisecond))
	for range 20 {
		est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, 10*profiled, h.now)
		h.run(1, noisy(40))
	}
	for _, r := range h.published {
		if r.Plan.Sessions[0].Error != "" {
			t.Fatalf("a %s re-plan dropped the session: %s", r.Cause, r.Plan.Sessions[0].Error)
		}
	}
	// The drift re-plan ran and kept the plan it had: nothing new to publish.
	if h.c.Status().Unchanged == 0 {
		t.Fatalf("published %v and no re-plan kept its plan; want a drift re-plan", causes(h.published))
	}
}

// TestControllerDriftToFasterHoldsLonger: a device measured 0.6× its
// profile (faster: the plan costs more than it must, its SLO holds) waits
// DriftHoldFaster, not DriftHold, before it re-plans; one measured 1.3×
// re-plans after DriftHold (TestControllerDriftReplans).
func TestControllerDriftToFasterHoldsLonger(t *testing.T) {
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, controlConfig(4000, time.Second), []placement.Member{{ID: "gpu-0", Hardware: "v100"}},
		Options{Calibration: est, DriftHold: 2 * time.Second, DriftHoldFaster: 10 * time.Second})
	g := h.last().Plan.Sessions[0].Modules[0].Configs[0]
	profiled := time.Duration(g.DurationMs * float64(time.Millisecond))
	tick := func(n int) {
		for range n {
			for range 12 {
				est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, time.Duration(0.6*float64(profiled)), h.now)
			}
			h.run(1, noisy(4000))
		}
	}
	tick(8) // well past DriftHold
	if len(h.published) != 1 {
		t.Fatalf("published %v 8 s into a drift to faster; want the initial plan only until DriftHoldFaster", causes(h.published))
	}
	tick(4)
	if len(h.published) != 2 || h.last().Cause != CauseDrift {
		t.Fatalf("published %v; want initial, drift once the drift to faster held DriftHoldFaster", causes(h.published))
	}
}

// mixedDrift is a Calibration whose worst entry is faster than planned
// (0.5×) while another is slower beyond the threshold (1.3×).
type mixedDrift struct{ Calibration }

func (mixedDrift) Drift(*api.Config, *api.Plan, time.Time) (float64, string, bool) {
	return 0.5, "fast@v100 b4c1", true
}

func (mixedDrift) DriftSlower(*api.Config, *api.Plan, time.Time) (float64, string, bool) {
	return 1.3, "slow@v100 b4c1", true
}

// TestControllerSlowerDriftIsNotHiddenByAFasterOne: with one entry 0.5× and
// another 1.3×, the controller acts on the slower after DriftHold, not on the
// faster after DriftHoldFaster.
func TestControllerSlowerDriftIsNotHiddenByAFasterOne(t *testing.T) {
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, controlConfig(4000, time.Second), []placement.Member{{ID: "gpu-0", Hardware: "v100"}},
		Options{Calibration: mixedDrift{est}, DriftHold: 2 * time.Second, DriftHoldFaster: 30 * time.Second})
	h.run(4, noisy(4000))
	// The fake calibrates nothing, so the drift re-plan gives the plan
	// already published: counted as unchanged, not published again.
	if st := h.c.Status(); st.Replans[CauseDrift] == 0 && st.Unchanged == 0 {
		t.Fatalf("no drift re-plan 4 s into a 1.3× drift beside a 0.5× one (published %v, %d unchanged); want one after the slower one's 2 s hold",
			causes(h.published), st.Unchanged)
	}
}

// TestControllerDriftBeyondPoolKeepsPlanThatFits: devices measured 3× slower
// than profiled, on a pool whose one device carries the plan, make a drift
// re-plan that needs two: it is not published while the served plan fits
// (admission refuses what the device cannot finish in time, reading the
// measured pace), as a rate rise beyond the pool is not. Found with the demo
// under a closed loop of 16 connections: the drift re-plans at the
// measured rates of the refused requests' retries published plans of
// 1,006–2,977 cost units on three CPU devices.
func TestControllerDriftBeyondPoolKeepsPlanThatFits(t *testing.T) {
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, controlConfig(400, time.Second), []placement.Member{{ID: "gpu-0", Hardware: "v100"}}, Options{Calibration: est, DriftHold: 2 * time.Second})
	if h.c.Status().Last.Shortfall.Missing() != 0 {
		t.Fatalf("the initial plan misses devices; the test needs one that fits")
	}
	g := h.last().Plan.Sessions[0].Modules[0].Configs[0]
	slow := 3 * time.Duration(g.DurationMs*float64(time.Millisecond))
	for range 20 {
		est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, slow, h.now)
		h.run(1, noisy(400))
	}
	keptBackThenConfig(t, h, "drift")
}
