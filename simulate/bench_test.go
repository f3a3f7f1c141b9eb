package simulate

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/dispatcher"
)

// BenchmarkSimulate measures simulator speed in simulated requests per wall
// second (req/s metric; target ≥ 1M/s) for a one-module session: the paper's M1
// (285 req/s + 15 dummy, batch 100, 3 machines). Each op is one simulated request.
func BenchmarkSimulate(b *testing.B) {
	for _, p := range []dispatcher.Policy{dispatcher.TC{}, dispatcher.RR{}} {
		b.Run(p.Name(), func(b *testing.B) {
			plan := handPlan("m1", 285, 15, 2000, hg{100, 1, 1000, 3, 300})
			// Simulate b.N requests at 285 req/s.
			d := time.Duration(float64(b.N) / 285 * float64(time.Second))
			if d < time.Second {
				d = time.Second
			}
			b.ReportAllocs()
			b.ResetTimer()
			r, err := Run(plan, Options{Policy: p, Duration: d})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if s := r.Sessions[0]; s.Completed != s.Requests {
				b.Fatalf("%d of %d completed", s.Completed, s.Requests)
			}
			b.ReportMetric(float64(r.Requests)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
