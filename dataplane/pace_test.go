package dataplane

import (
	"testing"
	"time"
)

// A backend's pace follows its full batches at once (the first sets it),
// is not lifted for long by one stalled batch (the second largest of the
// latest four), and a backend not measured yet takes the lower median of
// the measured ones' paces, until it is measured itself.
func TestHealthPace(t *testing.T) {
	h := NewHealth(HealthOptions{ProbeInterval: -1})
	defer h.Close()
	a, b, c, fresh := h.entry("a"), h.entry("b"), h.entry("c"), h.entry("fresh")
	near := func(got, want float64) bool { return got > want-1e-9 && got < want+1e-9 }
	// Each batch a priorEvery after the one before: the prior is swept at
	// most once a priorEvery.
	clock := time.Now()
	next := func() time.Time { clock = clock.Add(priorEvery); return clock }

	h.paced(a, 1.3, next())
	if p := a.Pace(); !near(p, 1.3) {
		t.Fatalf("after one batch at 1.3: pace %v; want 1.3", p)
	}
	if p := fresh.Pace(); !near(p, 1.3) {
		t.Errorf("an unmeasured backend with one measured at 1.3: pace %v; want 1.3", p)
	}
	if p := h.entry("joined").Pace(); !near(p, 1.3) {
		t.Errorf("a backend first seen after one measured at 1.3: pace %v; want the prior, 1.3", p)
	}
	h.paced(a, 3, next()) // one stalled batch
	if p := a.Pace(); !near(p, 1.3) {
		t.Errorf("after a stall of 3: pace %v; want 1.3 (the second largest)", p)
	}
	h.paced(a, 1.31, next())
	h.paced(a, 1.29, next())
	h.paced(a, 1.3, next()) // the stall is out of the latest four
	if p := a.Pace(); !near(p, 1.31) {
		t.Errorf("after the stall left the window: pace %v; want 1.31", p)
	}
	h.paced(b, 1, next())
	h.paced(c, 1, next())
	if p := fresh.Pace(); p != 1 {
		t.Errorf("unmeasured with paces 1.31, 1, 1 measured: %v; want 1 (their lower median)", p)
	}
	if p := h.entry("later").Pace(); p != 1 {
		t.Errorf("a backend first seen now: pace %v; want the prior, 1", p)
	}
	h.paced(fresh, 1.6, next())
	h.paced(b, 1, next())
	if p := fresh.Pace(); !near(p, 1.6) {
		t.Errorf("measured itself at 1.6: %v; want 1.6", p)
	}
	// A backend measured longer ago than priorWindow no longer counts.
	a.pacedAt.Store(clock.Add(-2 * priorWindow).UnixNano())
	b.pacedAt.Store(clock.Add(-2 * priorWindow).UnixNano())
	c.pacedAt.Store(clock.Add(-2 * priorWindow).UnixNano())
	h.paced(fresh, 1.6, next())
	if p := h.entry("new").Pace(); !near(p, 1.6) {
		t.Errorf("the only recent backend at 1.6: a new backend's pace %v; want 1.6", p)
	}
}
