package control

import (
	"math"
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

func TestRateMonitorWindowsAndEnvelope(t *testing.T) {
	m, err := NewRateMonitor(t0, MonitorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Handle("s", "a")
	if m.Handle("s", "a") != c {
		t.Fatal("Handle returned a second counter for the same key")
	}
	now := t0
	feed(m, c, &now, 100, 30*time.Second)
	r := m.Snapshot(now).Rates
	if len(r) != 1 || r[0].Session != "s" || r[0].Module != "a" {
		t.Fatalf("rates %+v: want one entry s/a", r)
	}
	for i, w := range r[0].Windows {
		if math.Abs(w-100) > 1e-9 {
			t.Errorf("window %v: %v req/s, want 100", m.windows[i], w)
		}
	}
	// A 1 s burst at 500 req/s shows in the envelope through the 1 s window,
	// while the 30 s window barely moves.
	feed(m, c, &now, 500, time.Second)
	r = m.Snapshot(now).Rates
	if got := r[0].Envelope; math.Abs(got-500) > 1e-9 {
		t.Errorf("envelope after a 1 s burst at 500: %v, want 500", got)
	}
	if got := r[0].Windows[2]; math.Abs(got-(100*29+500)/30.0) > 1e-9 {
		t.Errorf("30 s window after the burst: %v, want %v", got, (100*29+500)/30.0)
	}
	// Silence: the buckets clear as time passes, even if Advance skips ahead.
	now = now.Add(time.Minute)
	r = m.Snapshot(now).Rates
	if r[0].Envelope != 0 {
		t.Errorf("envelope after a silent minute: %v, want 0", r[0].Envelope)
	}
}

func TestRateMonitorEarlyWindowsUseWhatIsMeasured(t *testing.T) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a")
	now := t0
	if got := m.Snapshot(now).Rates[0].Envelope; got != 0 {
		t.Fatalf("before one bucket closed: %v, want 0", got)
	}
	feed(m, c, &now, 40, 2*time.Second)
	for i, w := range m.Snapshot(now).Rates[0].Windows {
		if math.Abs(w-40) > 1e-9 {
			t.Errorf("window %v after 2 s at 40 req/s: %v, want 40 (not diluted by time not yet measured)", m.windows[i], w)
		}
	}
}

func TestRateMonitorOptionErrors(t *testing.T) {
	for name, o := range map[string]MonitorOptions{
		"negative bucket":     {Bucket: -time.Second},
		"window not multiple": {Bucket: 300 * time.Millisecond, Windows: []time.Duration{time.Second}},
		"zero window":         {Windows: []time.Duration{0}},
	} {
		if _, err := NewRateMonitor(t0, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRateMonitorConcurrentAdd(t *testing.T) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a")
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
	if got := r.Windows[0]; got != 40000 {
		t.Errorf("1 s window: %v req/s, want 40000", got)
	}
}

func BenchmarkCounterAdd(b *testing.B) {
	m, _ := NewRateMonitor(t0, MonitorOptions{})
	c := m.Handle("s", "a")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
}
