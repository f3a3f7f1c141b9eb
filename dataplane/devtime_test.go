package dataplane

import (
	"math"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// devTimeRig is one module on one backend whose batch of 4 is profiled at
// 100 ms, with the calibration on: batches are handed to liveModule.observe
// as the sender hands them, with the round trip and the Timing a test
// chooses.
type devTimeRig struct {
	h    *Health
	est  *calibrate.Estimator
	lm   *liveModule
	bh   *backendHealth
	slot dispatcher.Slot
	cfg  *api.Config
}

func newDevTimeRig(t *testing.T) *devTimeRig {
	t.Helper()
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &api.Config{Profiles: []api.Profile{{Model: "m", Hardware: "v100", Entries: []api.ProfileEntry{
		{Batch: 4, Concurrency: 1, Duration: api.Duration(100 * time.Millisecond)}}}}}
	est.SetOffline(cfg)
	h := NewHealth(HealthOptions{ProbeInterval: -1, Calibration: est})
	t.Cleanup(h.Close)
	r := &devTimeRig{h: h, est: est, cfg: cfg, bh: h.entry("gpu-0"),
		slot: dispatcher.Slot{Backend: "gpu-0", Hardware: "v100", Batch: 4, Concurrency: 1, Duration: 100 * time.Millisecond}}
	r.lm = &liveModule{model: "m", h: h, profiled: func(string, int, int) time.Duration { return 100 * time.Millisecond }}
	return r
}

// batch hands a full batch whose round trip was rtt and whose answer
// carried tm to observe.
func (r *devTimeRig) batch(rtt time.Duration, tm backends.Timing) {
	r.lm.observe(r.bh, &r.slot, 0, time.Now().Add(-rtt), 4, tm, nil)
}

// plan is a plan made from the profile: batch 4 at 100 ms on one machine.
func (r *devTimeRig) plan() *api.Plan {
	return &api.Plan{Sessions: []api.SessionPlan{{Name: "s", Modules: []api.ModulePlan{{Name: "a", Model: "m", BudgetMs: 500,
		Configs: []api.GroupPlan{{Hardware: "v100", Batch: 4, Concurrency: 1, DurationMs: 100, Machines: 1}}}}}}}
}

func (r *devTimeRig) calibrated() time.Duration {
	return r.est.Calibrate(r.cfg, time.Now()).Profiles[0].Entries[0].Duration.D()
}

// TestHostDelayIsNotTheDevice: batches whose round trip is 3× the profile
// (a gateway host saturated: the answers wait for its CPU) while the
// backend reports its device time as profiled. Calibration, pace and the
// straggler EWMA stay at the profile, nothing drifts from the plan, and the
// 200 ms the host added is the backend's host share. The same round trips
// from a backend that reports no time are read as before, as a device 3×
// slow: the case this keeps apart.
func TestHostDelayIsNotTheDevice(t *testing.T) {
	r := newDevTimeRig(t)
	for range 40 {
		r.batch(300*time.Millisecond, backends.Timing{Queue: time.Millisecond, Compute: 100 * time.Millisecond})
	}
	if got := r.calibrated(); got != 100*time.Millisecond {
		t.Errorf("calibrated %v; want the profile's 100ms", got)
	}
	if p, s := r.bh.Pace(), r.bh.Slowness(); p != 1 || s != 1 || r.bh.slow.Load() {
		t.Errorf("pace %v, slowness %v, straggler %v; want 1, 1, no", p, s, r.bh.slow.Load())
	}
	if ratio, at, ok := r.est.Drift(r.cfg, r.plan(), time.Now()); ok && math.Abs(ratio-1) > 0.1 {
		t.Errorf("drift %.2f at %s; want none", ratio, at)
	}
	if hs := r.bh.HostShare(); hs < 190*time.Millisecond || hs > 260*time.Millisecond {
		t.Errorf("host share %v; want about 200ms (300ms round trip less 101ms at the backend)", hs)
	}

	old := newDevTimeRig(t)
	for range 40 {
		old.bh.lastEnd.Store(0) // one batch at a time on the device: none queued behind another
		old.batch(300*time.Millisecond, backends.Timing{})
	}
	if got := old.calibrated(); got < 290*time.Millisecond {
		t.Errorf("no time reported: calibrated %v; want the round trip, about 300ms (the old behaviour)", got)
	}
	if p := old.bh.Pace(); p < 2.9 || !old.bh.slow.Load() {
		t.Errorf("no time reported: pace %v, straggler %v; want about 3 and yes (the old behaviour)", p, old.bh.slow.Load())
	}
	if hs := old.bh.HostShare(); hs != 0 {
		t.Errorf("no time reported: host share %v; want 0 (unknown)", hs)
	}
}

// TestSlowedThenRestoredDevice: a device whose reported time is 1.6× its
// profile is learned so (pace, straggler EWMA, calibration), then follows it
// back: the pace at the third restored batch, the EWMA below
// slowScaleExit within a dozen; and a device slowed and then left idle
// loses its straggler mark forgetAfter after its last batch, its pace and
// slowness forgetPaceAfter after it (forget, on an injected time), and a
// device forgotten and still slow is measured so by its next batch.
func TestSlowedThenRestoredDevice(t *testing.T) {
	r := newDevTimeRig(t)
	slowed := backends.Timing{Compute: 160 * time.Millisecond}
	for range 20 {
		r.batch(170*time.Millisecond, slowed)
	}
	if p := r.bh.Pace(); p < 1.59 || p > 1.61 || !r.bh.slow.Load() {
		t.Fatalf("slowed 1.6×: pace %v, straggler %v; want 1.6 and yes", p, r.bh.slow.Load())
	}
	if got := r.calibrated(); got != 160*time.Millisecond {
		t.Errorf("slowed 1.6×: calibrated %v; want 160ms", got)
	}
	paceBack, slowBack := -1, -1
	for i := 1; i <= 30; i++ {
		r.batch(110*time.Millisecond, backends.Timing{Compute: 100 * time.Millisecond})
		if paceBack < 0 && r.bh.Pace() == 1 {
			paceBack = i
		}
		if slowBack < 0 && r.bh.Slowness() == 1 && !r.bh.slow.Load() {
			slowBack = i
		}
	}
	t.Logf("restored: pace back at batch %d, slowness at batch %d", paceBack, slowBack)
	if paceBack < 1 || paceBack > 3 || slowBack < 1 || slowBack > 15 {
		t.Errorf("restored: pace back at batch %d, slowness at %d; want within 3 and 15", paceBack, slowBack)
	}

	idle := newDevTimeRig(t)
	for range 20 {
		idle.batch(170*time.Millisecond, slowed)
	}
	idle.h.forget(time.Now().Add(forgetAfter / 2))
	if p := idle.bh.Pace(); p < 1.59 {
		t.Errorf("%v after its last batch: pace %v; want the 1.6 measured kept", forgetAfter/2, p)
	}
	idle.h.forget(time.Now().Add(forgetAfter + forgetEvery))
	if p, s := idle.bh.Pace(), idle.bh.Slowness(); p < 1.59 || s < 1.59 || idle.bh.slow.Load() {
		t.Errorf("%v after its last batch: pace %v, slowness %v, straggler %v; want the straggler mark dropped, the pace and slowness kept for its next batch",
			forgetAfter+forgetEvery, p, s, idle.bh.slow.Load())
	}
	idle.h.forget(time.Now().Add(forgetPaceAfter + forgetEvery))
	if p, s := idle.bh.Pace(), idle.bh.Slowness(); p != 1 || s != 1 || idle.bh.slow.Load() {
		t.Errorf("%v after its last batch: pace %v, slowness %v, straggler %v; want all forgotten", forgetPaceAfter+forgetEvery, p, s, idle.bh.slow.Load())
	}
	idle.batch(170*time.Millisecond, slowed) // the next batch measures it anew
	if p := idle.bh.Pace(); p < 1.59 || !idle.bh.slow.Load() {
		t.Errorf("one slowed batch after forgetting: pace %v, straggler %v; want 1.6 and yes", p, idle.bh.slow.Load())
	}
}

// A batch late because its hosts stalled, not its device (the 512-connection
// burst of docs/traffic.md: a 250 µs model answered after 53 ms): the
// late-batch line gives the backend's reported queue and compute beside the
// round trip, so the stall reads as network and host.
func TestLateLineSaysTheHostStalled(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := newDevTimeRig(t)
	r.h.log = zap.New(core)
	r.lm.session, r.lm.name, r.lm.health = "s", "a", map[string]*backendHealth{"gpu-0": r.bh}
	start := time.Now().Add(-53 * time.Millisecond)
	r.lm.observe(r.bh, &r.slot, 0, start, 4, backends.Timing{Compute: 250 * time.Microsecond}, nil)
	first := &dispatcher.Item{Arrival: start, Deadline: start.Add(40 * time.Millisecond)}
	b := &dispatcher.Batch{Slot: &r.slot, Items: []*dispatcher.Item{first}, Sent: start}
	r.lm.noteLate(b, first, start.Add(53*time.Millisecond), start.Add(48*time.Millisecond), nil)
	lines := logs.FilterMessage("batch answered after its oldest item's deadline").All()
	if len(lines) != 1 {
		t.Fatalf("%d late-batch lines, want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["backend_compute"] != 250*time.Microsecond || f["backend_queue"] != time.Duration(0) ||
		f["network_and_host"] != 53*time.Millisecond-250*time.Microsecond {
		t.Errorf("backend queue %v, compute %v, network and host %v; want 0, 250µs and the rest of the 53ms round trip",
			f["backend_queue"], f["backend_compute"], f["network_and_host"])
	}
}
