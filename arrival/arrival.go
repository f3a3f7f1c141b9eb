// Package arrival generates request inter-arrival gaps for the load generator and the
// simulator, so both drive the system with the same processes.
//
// A Process is not safe for concurrent use: each sender or simulation owns its own,
// seeded, so runs are reproducible.
package arrival

import (
	"fmt"
	"math"
	"time"

	//lint:ignore SA1019 x/exp/rand's PCG source keeps every seeded arrival sequence, and the figures measured with it in docs/, reproducible; math/rand/v2's PCG draws a different sequence.
	"golang.org/x/exp/rand"
	"gonum.org/v1/gonum/stat/distuv"
)

// Kinds lists the process names New accepts.
const Kinds = "constant, poisson, gamma"

// Process yields successive inter-arrival gaps.
type Process interface {
	// Next returns the gap between the previous arrival and the next one.
	Next() time.Duration
}

// New returns the arrival process kind at ratePerSec requests per second.
// cv2 is the squared coefficient of variation of the gaps and is read only by
// "gamma" (cv2 = 1 is Poisson; larger is burstier, as in InferLine's traces).
// Errors name the bad argument and what is allowed.
func New(kind string, ratePerSec, cv2 float64, seed uint64) (Process, error) {
	if !(ratePerSec > 0) || math.IsInf(ratePerSec, 0) {
		return nil, fmt.Errorf("arrival rate %v req/s: must be a finite number > 0", ratePerSec)
	}
	mean := 1 / ratePerSec
	switch kind {
	case "constant":
		return &constant{gap: seconds(mean)}, nil
	case "poisson":
		return &sampler{dist: distuv.Exponential{Rate: ratePerSec, Src: rand.NewSource(seed)}}, nil
	case "gamma":
		if !(cv2 > 0) || math.IsInf(cv2, 0) {
			return nil, fmt.Errorf("gamma arrivals: cv2 %v must be a finite number > 0", cv2)
		}
		// Gamma with shape k = 1/cv2 and rate k/mean has the given mean and cv².
		k := 1 / cv2
		return &sampler{dist: distuv.Gamma{Alpha: k, Beta: k / mean, Src: rand.NewSource(seed)}}, nil
	}
	return nil, fmt.Errorf("unknown arrival process %q; allowed: %s", kind, Kinds)
}

type constant struct{ gap time.Duration }

func (c *constant) Next() time.Duration { return c.gap }

type randomer interface{ Rand() float64 }

type sampler struct{ dist randomer }

func (s *sampler) Next() time.Duration { return seconds(s.dist.Rand()) }

// seconds converts a gap in seconds to a Duration, saturating at the largest
// Duration (about 292 years) instead of overflowing to a negative gap when the
// rate is tiny or a sample lands far in the tail.
func seconds(s float64) time.Duration {
	ns := s * float64(time.Second)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}
