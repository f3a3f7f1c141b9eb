package loadgen

import (
	"testing"
	"time"
)

func TestSummarizeNearestRank(t *testing.T) {
	ms := time.Millisecond
	seq := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[n-1-i] = time.Duration(i+1) * ms // reversed: Summarize must sort
		}
		return out
	}
	tests := []struct {
		name                      string
		lat                       []time.Duration
		slo                       time.Duration
		p50, p90, p99, p999, maxv time.Duration
		within                    int
	}{
		{"empty", nil, ms, 0, 0, 0, 0, 0, 0},
		{"one", []time.Duration{7 * ms}, 5 * ms, 7 * ms, 7 * ms, 7 * ms, 7 * ms, 7 * ms, 0},
		{"four", seq(4), 2 * ms, 2 * ms, 4 * ms, 4 * ms, 4 * ms, 4 * ms, 2},
		{"ten", seq(10), 0, 5 * ms, 9 * ms, 10 * ms, 10 * ms, 10 * ms, 0},
		{"hundred", seq(100), 95 * ms, 50 * ms, 90 * ms, 99 * ms, 100 * ms, 100 * ms, 95},
		{"thousand", seq(1000), time.Second, 500 * ms, 900 * ms, 990 * ms, 999 * ms, 1000 * ms, 1000},
		{"thousand and one", seq(1001), 0, 501 * ms, 901 * ms, 991 * ms, 1000 * ms, 1001 * ms, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(tc.lat, tc.slo)
			got := []time.Duration{s.P50, s.P90, s.P99, s.P999, s.Max}
			want := []time.Duration{tc.p50, tc.p90, tc.p99, tc.p999, tc.maxv}
			for i, name := range []string{"p50", "p90", "p99", "p99.9", "max"} {
				if got[i] != want[i] {
					t.Errorf("%s = %v, want %v", name, got[i], want[i])
				}
			}
			if s.WithinSLO != tc.within {
				t.Errorf("WithinSLO = %d, want %d", s.WithinSLO, tc.within)
			}
			if s.Count != len(tc.lat) {
				t.Errorf("Count = %d, want %d", s.Count, len(tc.lat))
			}
		})
	}
}

func TestPercentileClamps(t *testing.T) {
	l := []time.Duration{1, 2, 3}
	if got := Percentile(l, 0); got != 1 {
		t.Errorf("P0 = %v, want the minimum 1", got)
	}
	if got := Percentile(l, 150); got != 3 {
		t.Errorf("P150 = %v, want the maximum 3", got)
	}
	if got := Percentile(l, 33.34); got != 2 {
		t.Errorf("P33.34 of 3 = %v, want 2 (rank ⌈1.0002⌉ = 2)", got)
	}
}

func BenchmarkSummarize(b *testing.B) {
	src := make([]time.Duration, 100000)
	for i := range src {
		src[i] = time.Duration((i * 7919) % 100000)
	}
	buf := make([]time.Duration, len(src))
	for b.Loop() {
		copy(buf, src)
		Summarize(buf, 50000)
	}
}
