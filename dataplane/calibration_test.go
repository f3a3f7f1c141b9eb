package dataplane

import (
	"testing"
	"time"
)

// TestRanOnDevice is what the calibration counts of a batch's call: on a
// one-lane device, from the end of the batch answered before it there (it
// queued behind that one), else the whole call; on a device of several lanes,
// the whole call when it was not expected to queue, nothing when it was.
func TestRanOnDevice(t *testing.T) {
	at := time.Unix(1000, 0)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	var bh backendHealth
	for _, c := range []struct {
		name       string
		start, end int
		conc       int
		wait       time.Duration
		want       time.Duration
		ok         bool
	}{
		{"first batch", 0, 100, 1, 0, 100 * time.Millisecond, true},
		{"queued behind it", 50, 220, 1, 0, 120 * time.Millisecond, true},
		{"after an idle gap", 300, 400, 1, 0, 100 * time.Millisecond, true},
		{"several lanes, not expected to queue", 350, 500, 2, 0, 150 * time.Millisecond, true},
		{"several lanes, expected to queue", 450, 600, 2, 50 * time.Millisecond, 0, false},
	} {
		got, ok := bh.ran(ms(c.start), ms(c.end), c.conc, c.wait)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: ran %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
