package api

import (
	"testing"
	"time"
)

// A partial batch runs for the duration linear between the entries around
// it; a full one for its entry's; below the smallest entry, the smallest's;
// beyond the largest, none. Entries at another concurrency do not count.
func TestDurationAt(t *testing.T) {
	ms := func(v float64) Duration { return Duration(time.Duration(v * float64(time.Millisecond))) }
	entries := []ProfileEntry{
		{Batch: 16, Concurrency: 1, Duration: ms(30)},
		{Batch: 4, Concurrency: 1, Duration: ms(9)},
		{Batch: 2, Concurrency: 1, Duration: ms(7)},
		{Batch: 8, Concurrency: 2, Duration: ms(40)},
		{Batch: 2, Concurrency: 2, Duration: ms(8)},
	}
	for _, tc := range []struct {
		c    int
		n    float64
		want float64 // ms; < 0: not ok
	}{
		{1, 1, 7}, {0, 2, 7}, {1, 3, 8}, {1, 4, 9}, {1, 10, 19.5}, {1, 16, 30}, {1, 17, -1},
		{2, 1, 8}, {2, 5, 24}, {2, 8, 40}, {2, 9, -1}, {3, 1, -1},
	} {
		d, ok := DurationAt(entries, tc.c, tc.n)
		switch {
		case tc.want < 0 && ok:
			t.Errorf("c=%d n=%v: %v, want none", tc.c, tc.n, d)
		case tc.want >= 0 && (!ok || d != time.Duration(tc.want*float64(time.Millisecond))):
			t.Errorf("c=%d n=%v: %v %v, want %vms", tc.c, tc.n, d, ok, tc.want)
		}
	}
}
