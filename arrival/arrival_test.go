package arrival

import (
	"math"
	"testing"
)

func TestMeanAndVariability(t *testing.T) {
	const rate, n = 200.0, 200000
	for _, tc := range []struct {
		kind string
		cv2  float64
	}{{"constant", 0}, {"poisson", 0}, {"gamma", 4}, {"gamma", 0.25}} {
		t.Run(tc.kind, func(t *testing.T) {
			p, err := New(tc.kind, rate, tc.cv2, 7)
			if err != nil {
				t.Fatal(err)
			}
			var sum, sq float64
			for i := 0; i < n; i++ {
				g := p.Next().Seconds()
				sum += g
				sq += g * g
			}
			mean := sum / n
			cv2 := (sq/n - mean*mean) / (mean * mean)
			if math.Abs(mean*rate-1) > 0.02 {
				t.Errorf("mean gap %.6fs, want %.6fs (±2%%)", mean, 1/rate)
			}
			want := map[string]float64{"constant": 0, "poisson": 1, "gamma": tc.cv2}[tc.kind]
			if math.Abs(cv2-want) > 0.1*math.Max(want, 0.1) {
				t.Errorf("cv² of gaps %.3f, want %.3f", cv2, want)
			}
		})
	}
}

func TestBadArguments(t *testing.T) {
	for _, tc := range []struct {
		kind      string
		rate, cv2 float64
	}{{"poisson", 0, 0}, {"poisson", -1, 0}, {"poisson", math.Inf(1), 0}, {"gamma", 10, 0}, {"uniform", 10, 1}} {
		if _, err := New(tc.kind, tc.rate, tc.cv2, 1); err == nil {
			t.Errorf("New(%q, %v, %v) accepted bad arguments", tc.kind, tc.rate, tc.cv2)
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	a, _ := New("poisson", 50, 0, 3)
	b, _ := New("poisson", 50, 0, 3)
	for i := 0; i < 100; i++ {
		if a.Next() != b.Next() {
			t.Fatal("same seed gave different gaps")
		}
	}
}

// A tiny rate's gap saturates at the largest Duration instead of overflowing
// to a negative one (which would schedule every arrival at once).
func TestTinyRateGapSaturates(t *testing.T) {
	for _, kind := range []string{"constant", "poisson", "gamma"} {
		p, err := New(kind, 1e-12, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			if g := p.Next(); g <= 0 {
				t.Fatalf("%s at 1e-12 req/s: gap %v, want > 0", kind, g)
			}
		}
	}
}
