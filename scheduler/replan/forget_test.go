package replan

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/placement"
)

// TestControllerDriftOfABurstIsForgotten: a device measured 2.1× its
// profile for a second (a burst's batches: the hold starts) and then not
// measured at all does not re-plan: the estimator forgets the series
// (calibrate.Options.Recent) and the hold is reset once nothing has been
// measured beyond the threshold for a hold. A drift measured later holds a
// whole DriftHold of its own before it re-plans.
func TestControllerDriftOfABurstIsForgotten(t *testing.T) {
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, controlConfig(4000, time.Second), []placement.Member{{ID: "gpu-0", Hardware: "v100"}},
		Options{Calibration: est, DriftHold: 3 * time.Second})
	g := h.last().Plan.Sessions[0].Modules[0].Configs[0]
	profiled := time.Duration(g.DurationMs * float64(time.Millisecond))
	observe := func(n int, slow float64) {
		for range n {
			est.Observe("m", "v100", "gpu-0", g.Batch, g.Concurrency, time.Duration(slow*float64(profiled)), h.now)
		}
	}
	observe(12, 2.1)
	h.run(1, noisy(4000)) // the drift is seen: the hold starts
	if h.c.driftFrom.IsZero() {
		t.Fatal("a 2.1× drift of 12 batches did not start the hold")
	}
	h.run(2, noisy(4000)) // within the hold, then nothing more measured
	h.run(int((calibrate.DefaultForget+3*time.Second)/time.Second), noisy(4000))
	if len(h.published) != 1 {
		t.Fatalf("published %v; want the initial plan only (the burst's drift forgotten)", causes(h.published))
	}
	if !h.c.driftFrom.IsZero() {
		t.Errorf("hold still running from %v, %v later", h.c.driftFrom, h.now.Sub(h.c.driftFrom))
	}
	// A sustained 1.3× now: no re-plan within its own hold, one after.
	for range 2 {
		observe(12, 1.3)
		h.run(1, noisy(4000))
	}
	if len(h.published) != 1 {
		t.Fatalf("re-planned %v into a new drift's hold: the old hold fired", causes(h.published))
	}
	for range 3 {
		observe(12, 1.3)
		h.run(1, noisy(4000))
	}
	if len(h.published) != 2 || h.last().Cause != CauseDrift {
		t.Errorf("published %v; want initial, drift", causes(h.published))
	}
}

// TestControllerForgetsColocationSlowdown: the slowdown that separated a
// pair is kept while they are apart for slowdownMemory (placements keep
// them apart) and dropped after it; nothing re-plans for it.
func TestControllerForgetsColocationSlowdown(t *testing.T) {
	h, batch := colocSetup(t, 4, 1.5)
	for range 12 {
		batch()
	}
	h.run(4, noisy(1000))
	if len(h.published) != 2 || h.last().Cause != CauseColocation {
		t.Fatalf("published %v; want initial, colocation", causes(h.published))
	}
	if n := len(h.c.placeOptions().Slowdowns); n == 0 {
		t.Fatal("no slowdown learned from the pair")
	}
	apart := h.now
	h.run(int(slowdownMemory/time.Second)/2, noisy(1000))
	if n := len(h.c.placeOptions().Slowdowns); n == 0 {
		t.Errorf("%v after the separation: slowdown forgotten; want it kept for %v", h.now.Sub(apart), slowdownMemory)
	}
	h.run(int(slowdownMemory/time.Second)/2+2, noisy(1000))
	if s := h.c.placeOptions().Slowdowns; len(s) != 0 {
		t.Errorf("%v after the separation: slowdowns %v; want none (not measured since)", h.now.Sub(apart), s)
	}
	if len(h.published) != 2 {
		t.Errorf("published %v; want nothing more", causes(h.published))
	}
}
