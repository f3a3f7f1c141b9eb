package replan

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed adds rate req/s to c for d, one bucket at a time, advancing m.
func feed(m *RateMonitor, c *Counter, now *time.Time, rate float64, d time.Duration) {
	for end := now.Add(d); now.Before(end); {
		c.Add(int64(math.Round(rate * m.bucket.Seconds())))
		*now = now.Add(m.bucket)
		m.Advance(*now)
	}
}

func TestEnvelopeWindow(t *testing.T) {
	for name, tc := range map[string]struct {
		slo  time.Duration
		rate float64
		want time.Duration
	}{
		"long SLO":                          {2 * time.Second, 400, 2 * time.Second},
		"short SLO, high rate":              {100 * time.Millisecond, 2000, 100 * time.Millisecond},
		"short SLO, low rate: 100 arrivals": {400 * time.Millisecond, 20, 5 * time.Second},
		"SLO 400 ms at 150 req/s":           {400 * time.Millisecond, 150, 666666667 * time.Nanosecond},
		"no configured rate":                {300 * time.Millisecond, 0, time.Second},
		"no rate, long SLO":                 {3 * time.Second, 0, 3 * time.Second},
	} {
		if got := EnvelopeWindow(tc.slo, tc.rate); got != tc.want {
			t.Errorf("%s: EnvelopeWindow(%v, %v) = %v, want %v", name, tc.slo, tc.rate, got, tc.want)
		}
	}
}

func TestRateMonitorHandleRoundsWindow(t *testing.T) {
	m, _ := NewRateMonitor(t0, MonitorOptions{Horizon: 10 * time.Second})
	for _, tc := range []struct{ window, want time.Duration }{
		{250 * time.Millisecond, 300 * time.Millisecond}, // up to whole buckets
		{0, 100 * time.Millisecond},                      // at least one bucket
		{time.Hour, 10 * time.Second},                    // at most the horizon
		{2 * time.Second, 2 * time.Second},               // a later Handle changes it
	} {
		c := m.Handle("s", "a", tc.window)
		if got := m.Snapshot(t0).Rates[0].Window; got != tc.want || m.Handle("s", "a", tc.window) != c {
			t.Errorf("Handle(%v): window %v, want %v, one counter per key", tc.window, got, tc.want)
		}
	}
}

// The three rates of a 1 s window over a 30 s horizon: a 1 s burst is the
// envelope until it leaves the horizon, the latest window forgets it at once,
// the mean spreads it over the horizon.
func TestRateMonitorCurrentEnvelopeMean(t *testing.T) {
	m, err := NewRateMonitor(t0, MonitorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Handle("s", "a", time.Second)
	now := t0
	check := func(when string, current, envelope, mean float64) {
		t.Helper()
		r := m.Snapshot(now).Rates
		if len(r) != 1 || r[0].Session != "s" || r[0].Module != "a" {
			t.Fatalf("%s: rates %+v, want one entry s/a", when, r)
		}
		got := r[0]
		if math.Abs(got.Current-current) > 1e-9 || math.Abs(got.Envelope-envelope) > 1e-9 || math.Abs(got.Mean-mean) > 1e-9 {
			t.Errorf("%s: current %v, envelope %v, mean %v req/s; want %v, %v, %v", when, got.Current, got.Envelope, got.Mean, current, envelope, mean)
		}
	}
	feed(m, c, &now, 100, 30*time.Second)
	check("30 s at 100", 100, 100, 100)
	feed(m, c, &now, 500, time.Second)
	check("then 1 s at 500", 500, 500, (100*29+500)/30.0)
	feed(m, c, &now, 100, 5*time.Second)
	check("then 5 s at 100", 100, 500, (100*29+500)/30.0)
	feed(m, c, &now, 100, 25*time.Second) // the burst leaves the horizon
	check("the burst 31 s ago", 100, 100, 100)
	now = now.Add(time.Minute) // silence: the buckets clear, even when Advance skips ahead
	check("a silent minute", 0, 0, 0)
}

// A burst shorter than the window counts by its volume over the window.
func TestRateMonitorShortBurstSpreadOverWindow(t *testing.T) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a", 2*time.Second)
	now := t0
	feed(m, c, &now, 400, 10*time.Second)
	feed(m, c, &now, 800, 300*time.Millisecond)
	feed(m, c, &now, 400, 3*time.Second)
	if got, want := m.Snapshot(now).Rates[0].Envelope, 400*(1+0.3/2); math.Abs(got-want) > 1e-9 {
		t.Errorf("envelope after 300 ms at 2× in a 2 s window: %v req/s, want %v (the burst's volume over the window)", got, want)
	}
}

func TestRateMonitorEarlyRatesUseWhatIsMeasured(t *testing.T) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a", 5*time.Second)
	now := t0
	if r := m.Snapshot(now).Rates[0]; r.Envelope != 0 || r.Current != 0 || r.Mean != 0 {
		t.Fatalf("before one bucket closed: %+v, want zeros", r)
	}
	feed(m, c, &now, 40, 2*time.Second)
	if r := m.Snapshot(now).Rates[0]; math.Abs(r.Current-40) > 1e-9 || math.Abs(r.Envelope-40) > 1e-9 || math.Abs(r.Mean-40) > 1e-9 {
		t.Errorf("after 2 s at 40 req/s: %+v; want 40 each (not diluted by time not yet measured)", r)
	}
}

func TestRateMonitorOptionErrors(t *testing.T) {
	for name, o := range map[string]MonitorOptions{
		"negative bucket":      {Bucket: -time.Second},
		"horizon not multiple": {Bucket: 300 * time.Millisecond, Horizon: time.Second},
		"negative horizon":     {Horizon: -time.Second},
	} {
		if _, err := NewRateMonitor(t0, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRateMonitorConcurrentAdd(t *testing.T) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a", time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				c.Add(1)
			}
		}()
	}
	wg.Wait()
	r := m.Snapshot(t0.Add(time.Second)).Rates[0]
	// 40000 arrivals in the first bucket, measured over the 1 s that passed.
	if r.Current != 40000 {
		t.Errorf("1 s window: %v req/s, want 40000", r.Current)
	}
}

// TestPoissonEnvelope is why EnvelopeWindow has a floor: on steady Poisson
// traffic with a short SLO (100 ms), the envelope at the floored window stays
// near the mean and the latest window seldom leaves the 20 % up band, while
// the SLO-long window at a low rate measures mostly noise. Figures for
// docs/control-plane.md: go test -v -run PoissonEnvelope ./scheduler/replan
func TestPoissonEnvelope(t *testing.T) {
	const slo = 100 * time.Millisecond
	for _, tc := range []struct {
		rate    float64
		floored bool
		maxEnv  float64 // envelope / mean, averaged over 30 s horizons
	}{
		{20, true, 1.35}, {150, true, 1.35}, {1000, true, 1.35},
		{20, false, math.Inf(1)}, // the SLO alone: noise
	} {
		window := slo
		if tc.floored {
			window = EnvelopeWindow(slo, tc.rate)
		}
		env, above, window := poissonEnvelope(tc.rate, window, 600*time.Second)
		t.Logf("%4.0f req/s, window %v: envelope %.2f× the mean; latest window above mean×1.2 %.1f %% of the time", tc.rate, window, env, 100*above)
		if env > tc.maxEnv || above > 0.05 && tc.floored {
			t.Errorf("%v req/s over %v windows: envelope %.2f× the mean, above the band %.1f %% of the time; want ≤ %.2f× and ≤ 5 %%", tc.rate, window, env, 100*above, tc.maxEnv)
		}
		if !tc.floored && env < 2 {
			t.Errorf("%v req/s over the SLO (%v) alone: envelope %.2f× the mean; the test expects the noise the floor avoids (≥ 2×)", tc.rate, window, env)
		}
	}
}

// poissonEnvelope feeds Poisson arrivals at rate (seeded) for d through a
// monitor with the given window and returns the mean of envelope/rate sampled
// every horizon, the share of buckets whose latest window is above rate×1.2,
// and the window measured (rounded to buckets).
func poissonEnvelope(rate float64, window, d time.Duration) (env, above float64, measured time.Duration) {
	rng := rand.New(rand.NewPCG(1, uint64(rate)))
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a", window)
	now := t0
	var envSum float64
	var n, high, samples int
	for i := 1; now.Before(t0.Add(d)); i++ {
		// Poisson count of one bucket: arrivals until the exponential gaps pass it.
		k := 0
		for t := rng.ExpFloat64() / rate; t < m.bucket.Seconds(); t += rng.ExpFloat64() / rate {
			k++
		}
		c.Add(int64(k))
		now = now.Add(m.bucket)
		r := m.Snapshot(now).Rates[0]
		measured = r.Window
		if now.Sub(t0) < m.Horizon() {
			continue
		}
		samples++
		if r.Current > 1.2*rate {
			high++
		}
		if i%m.horizon == 0 {
			envSum += r.Envelope / rate
			n++
		}
	}
	return envSum / float64(n), float64(high) / float64(samples), measured
}

func BenchmarkCounterAdd(b *testing.B) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a", time.Second)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
}
