package replan

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/arrival"
)

// upRule runs the controller's up rule (risen: the latest window above the
// band, the recent rate significant; sustained) on a monitor fed Poisson
// arrivals at rate (the load generator's process, seeded), stepped to
// rate×step at 60 s, for 80 s with static mode's timing (a check every 100 ms bucket, 500 ms sustained). It
// returns whether the rule fired before the step, and how long after the step
// it fired (-1: not within the 20 s).
func upRule(rate, step, z float64, slo time.Duration, seed uint64) (falseFire bool, detect time.Duration) {
	const sustain = 500 * time.Millisecond
	p, _ := arrival.New("poisson", rate, 0, seed)
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a", EnvelopeWindow(slo, rate))
	stepAt := t0.Add(60 * time.Second)
	now, next := t0, t0.Add(p.Next())
	var since time.Time
	for now.Before(stepAt.Add(20 * time.Second)) {
		end := now.Add(m.bucket)
		for next.Before(end) {
			c.Add(1)
			g := p.Next()
			if !next.Before(stepAt) {
				g = time.Duration(float64(g) / step)
			}
			next = next.Add(g)
		}
		now = end
		r := m.Snapshot(now).Rates[0]
		if !risen(r.Current, r.Recent, r.RecentSpan, rate, 0.2, z) {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = now
		}
		if now.Sub(since) < sustain {
			continue
		}
		if now.After(stepAt) {
			return falseFire, now.Sub(stepAt)
		}
		falseFire, since = true, time.Time{}
	}
	return falseFire, -1
}

// TestUpSignificanceOnPoisson measures the up rule on 20 seeded runs of the
// load generator's Poisson process at each of four rates: 60 s at the planned
// rate, then a step to 1.5× and, separately, to 2×. With the default
// significance no run re-plans on noise; with the band alone some do; every
// step to 2× at 50 req/s and above is seen within 4 s, and to 1.5× within
// 8 s (docs/control-plane.md, "A rise must be significant").
func TestUpSignificanceOnPoisson(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		slo  time.Duration
	}{{2, 3 * time.Second}, {50, 900 * time.Millisecond}, {150, 100 * time.Millisecond}, {1000, 100 * time.Millisecond}} {
		for _, z := range []float64{-1, DefaultUpSignificance} {
			falseRuns := 0
			slowest := map[float64]time.Duration{}
			missed := map[float64]int{}
			for seed := uint64(1); seed <= 20; seed++ {
				for _, step := range []float64{1.5, 2} {
					f, d := upRule(tc.rate, step, z, tc.slo, seed)
					if f && step == 2 {
						falseRuns++
					}
					if d < 0 {
						missed[step]++
					}
					slowest[step] = max(slowest[step], d)
				}
			}
			t.Logf("%5.0f req/s (window %v), significance %4.1f: %2d of 20 runs re-plan on noise in 60 s; step to 1.5× seen in %2d/20 within %v, to 2× in %2d/20 within %v",
				tc.rate, min(EnvelopeWindow(tc.slo, tc.rate), DefaultHorizon), z, falseRuns, 20-missed[1.5], slowest[1.5], 20-missed[2], slowest[2])
			if z < 0 {
				continue
			}
			if falseRuns > 0 {
				t.Errorf("%v req/s: %d of 20 runs of Poisson arrivals at the planned rate re-planned up; want none", tc.rate, falseRuns)
			}
			if tc.rate >= 50 && (missed[2] > 0 || slowest[2] > 4*time.Second || missed[1.5] > 0 || slowest[1.5] > 8*time.Second) {
				t.Errorf("%v req/s: a step to 2× seen in %d/20 (slowest %v), to 1.5× in %d/20 (slowest %v); want all, within 4 s and 8 s",
					tc.rate, 20-missed[2], slowest[2], 20-missed[1.5], slowest[1.5])
			}
		}
	}
}
