package api

import "time"

// DurationAt returns how long a batch of n items (n may be a mean, hence a
// float) runs at concurrency c according to entries, one model's profile on
// one hardware type: an entry's own duration at its batch, linear between
// the two entries around n, and the smallest entry's duration below it (the
// profile says nothing below its smallest batch, and a device is not taken to
// run faster than it measured). Concurrency 0 counts as 1, as in the
// entries. ok is false when no entry at concurrency c has a batch ≥ n.
//
// It is the project's one model of a partial batch: the emulated backend
// runs a batch of n for this long (backends/sim), the calibration scales a
// partial batch's time to the entry that covers it by it (calibrate), and
// the evaluation charges a batch by it (docs/evaluation.md, "Why the chain's
// device time runs over the simulation"). O(len(entries)), no allocation.
func DurationAt(entries []ProfileEntry, c int, n float64) (d time.Duration, ok bool) {
	c = max(c, 1)
	var lo, hi *ProfileEntry
	for i := range entries {
		e := &entries[i]
		if max(e.Concurrency, 1) != c {
			continue
		}
		b := float64(e.Batch)
		if b <= n && (lo == nil || e.Batch > lo.Batch) {
			lo = e
		}
		if b >= n && (hi == nil || e.Batch < hi.Batch) {
			hi = e
		}
	}
	switch {
	case hi == nil:
		return 0, false
	case lo == nil || lo.Batch == hi.Batch:
		return hi.Duration.D(), true
	}
	f := (n - float64(lo.Batch)) / float64(hi.Batch-lo.Batch)
	return lo.Duration.D() + time.Duration(f*float64(hi.Duration.D()-lo.Duration.D())), true
}
