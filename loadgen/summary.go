package loadgen

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of a set of latencies.
type Summary struct {
	Count                               int
	Min, Mean, P50, P90, P99, P999, Max time.Duration
	// WithinSLO counts latencies ≤ the SLO given to Summarize; 0 when it was 0.
	WithinSLO int
}

// Summarize sorts latencies in place (ascending) and returns their distribution.
// Percentiles use the nearest-rank method: Pp is the smallest latency such that at
// least p % of the latencies are ≤ it, i.e. sorted[⌈p/100·n⌉−1]; so P50 of
// {1,2,3,4} is 2 and P100 is the maximum. An empty slice gives the zero Summary.
// slo ≤ 0 means no SLO: WithinSLO stays 0.
//
// The load generator passes the latencies of successful requests; the simulator may
// pass its own. The caller decides the denominator of SLO attainment (the load
// generator divides WithinSLO by the requests sent, so errors count as misses).
func Summarize(latencies []time.Duration, slo time.Duration) Summary {
	n := len(latencies)
	if n == 0 {
		return Summary{}
	}
	slices.Sort(latencies)
	var sum float64
	within := 0
	for _, l := range latencies {
		sum += float64(l)
		if slo > 0 && l <= slo {
			within++
		}
	}
	return Summary{
		Count:     n,
		Min:       latencies[0],
		Mean:      time.Duration(sum / float64(n)),
		P50:       Percentile(latencies, 50),
		P90:       Percentile(latencies, 90),
		P99:       Percentile(latencies, 99),
		P999:      Percentile(latencies, 99.9),
		Max:       latencies[n-1],
		WithinSLO: within,
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of sorted,
// which must be in ascending order: sorted[⌈p/100·n⌉−1]. p is read to a hundredth
// of a percent, so 99.9 is exact. It returns 0 for an empty slice; p outside
// (0, 100] is clamped.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := int64(len(sorted))
	if n == 0 {
		return 0
	}
	bp := int64(math.Round(p * 100)) // basis points of a percent: 99.9 → 9990
	bp = max(1, min(bp, 10000))
	rank := (bp*n + 9999) / 10000 // ⌈bp·n/10000⌉ in integers
	return sorted[max(rank, 1)-1]
}
