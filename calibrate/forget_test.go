package calibrate

import (
	"testing"
	"time"
)

// TestForgetSlowedThenRestored: a device 1.6× slower than profiled for 20 s
// at 10 batches a second, then as profiled again. The estimate follows the
// device within MaxAge (5 s) of the restore, where the 64-batch window alone
// took 58 batches, and the drift against a plan made from the slowdown is
// measured at once after that.
func TestForgetSlowedThenRestored(t *testing.T) {
	off := paperGPUs()
	for _, rate := range []struct {
		name  string
		every time.Duration
		back  time.Duration // the estimate is the profile's by then
	}{
		{"10 batches/s", 100 * time.Millisecond, 5 * time.Second},
		{"1 batch/s", time.Second, 10 * time.Second}, // MinSamples (10) newest
		{"200 batches/s", 5 * time.Millisecond, time.Second},
	} {
		t.Run(rate.name, func(t *testing.T) {
			e := newEst(t, Options{})
			now := t0
			run := func(d, dur time.Duration) {
				for end := now.Add(dur); now.Before(end); now = now.Add(rate.every) {
					e.Observe("m2", "v100", "gpu-0", 4, 1, d, now)
				}
			}
			run(256*ms, 20*time.Second) // 1.6× the 160 ms profile
			if got := entry(e.Calibrate(off, now), "m2", "v100", 4); got != 256*ms {
				t.Fatalf("slowed: calibrated %v; want 256ms", got)
			}
			restored := now
			var backAt time.Duration = -1
			for now.Sub(restored) < 2*rate.back {
				run(160*ms, rate.every)
				if backAt < 0 && entry(e.Calibrate(off, now), "m2", "v100", 4) == 160*ms {
					backAt = now.Sub(restored)
				}
			}
			t.Logf("%s: back to the profile %v after the restore", rate.name, backAt)
			if backAt < 0 || backAt > rate.back {
				t.Errorf("estimate back to the profile after %v; want within %v", backAt, rate.back)
			}
			if r, at, ok := e.Drift(off, planOn(256*ms, 200*ms), now); !ok || r > 0.63 || r < 0.62 {
				t.Errorf("drift against the slowed plan = %.3f at %s (%v); want 0.625 (160/256)", r, at, ok)
			}
		})
	}
}

// TestForgetUnmeasured: an entry a burst alone filled (batch 8, 2.1× slow)
// is forgotten Recent after its last batch, though the window still holds
// it: its calibrated duration goes back to the model's measured ratio (the
// batches of 4 as profiled), Drift no longer counts it, and neither does
// Snapshot once any later batch is seen.
func TestForgetUnmeasured(t *testing.T) {
	off := paperGPUs()
	e := newEst(t, Options{})
	now := t0
	for range 40 {
		e.Observe("m2", "v100", "gpu-0", 8, 1, 560*ms, now) // 2.1× the 267 ms profile
		e.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, now)
		now = now.Add(50 * time.Millisecond)
	}
	if got := entry(e.Calibrate(off, now), "m2", "v100", 8); got != 560*ms {
		t.Fatalf("during the burst: calibrated b8 %v; want 560ms", got)
	}
	burstEnd := now
	for now.Sub(burstEnd) <= DefaultForget+time.Second {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, now)
		now = now.Add(100 * time.Millisecond)
	}
	if got := entry(e.Calibrate(off, now), "m2", "v100", 8); got != 267*ms {
		t.Errorf("%v after the burst: calibrated b8 %v; want the profile's 267ms (the model measures 1.0× now)", now.Sub(burstEnd), got)
	}
	plan := planOn(160*ms, 200*ms)
	plan.Sessions[0].Modules[0].Configs[0].Batch = 8
	plan.Sessions[0].Modules[0].Configs[0].DurationMs = 267
	if r, at, ok := e.Drift(off, plan, now); ok && r > 1.01 {
		t.Errorf("drift %.3f at %s from an entry not measured for %v", r, at, now.Sub(burstEnd))
	}
	for _, m := range e.Snapshot() {
		if m.Batch == 8 {
			t.Errorf("Snapshot still holds %v, last measured %v before the newest batch", m.SeriesKey, now.Sub(m.Last))
		}
	}
}

// TestForgetColocation: a slowdown measured while two models shared gpu-1 is
// reported while measured, and gone within Recent of the shared series'
// last batch, as the alone series goes on.
func TestForgetColocation(t *testing.T) {
	e := newEst(t, Options{MinSamples: 4})
	p := planOn(160*ms, 200*ms)
	p.Sessions[0].Modules[0].Configs[0].Backends = []string{"gpu-0", "gpu-1"}
	p.Sessions[0].Modules[1].Configs[0].Backends = []string{"gpu-1"}
	now := t0
	for range 8 {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, now)
		e.Observe("m2", "v100", "gpu-1", 4, 1, 240*ms, now)
		now = now.Add(100 * time.Millisecond)
	}
	if got := e.Colocations(p); len(got) != 1 || got[0].Slowdown != 1.5 {
		t.Fatalf("while shared: %+v; want m2 on gpu-1 1.5×", got)
	}
	last := now
	for now.Sub(last) <= DefaultForget+time.Second {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, now)
		now = now.Add(100 * time.Millisecond)
	}
	if got := e.Colocations(p); len(got) != 0 {
		t.Errorf("%v after gpu-1's last batch: %+v; want the slowdown forgotten", now.Sub(last), got)
	}
}

// TestLoadedSeriesKept: a series only loaded (no time) is not forgotten, and
// gives way to live samples once MinSamples of them are within MaxAge.
func TestLoadedSeriesKept(t *testing.T) {
	e := newEst(t, Options{MinSamples: 4})
	for range 8 {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 256*ms, t0)
	}
	data, err := e.Marshal(t0)
	if err != nil {
		t.Fatal(err)
	}
	f := newEst(t, Options{MinSamples: 4})
	if err := f.Unmarshal(data); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Hour)
	f.Observe("m3", "v100", "gpu-0", 4, 1, 200*ms, later) // another series moves the clock
	if got := entry(f.Calibrate(paperGPUs(), later), "m2", "v100", 4); got != 256*ms {
		t.Errorf("loaded series an hour on: calibrated %v; want the loaded 256ms", got)
	}
	for i := range 4 {
		f.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, later.Add(time.Duration(i)*time.Second))
	}
	if got := entry(f.Calibrate(paperGPUs(), later.Add(4*time.Second)), "m2", "v100", 4); got != 160*ms {
		t.Errorf("after 4 live batches: calibrated %v; want the live 160ms", got)
	}
}
