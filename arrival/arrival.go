// Package arrival generates request inter-arrival gaps for the load generator and the
// simulator, so both drive the system with the same processes: constant, Poisson,
// gamma (a renewal process with a given cv² of gaps), an on/off Markov-modulated
// Poisson process (MMPP, bursts) and the replay of a recorded trace (Trace,
// ReadTrace). docs/traffic.md describes them and the trace formats.
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

// Kinds lists the process names Spec.New accepts.
const Kinds = "constant, poisson, gamma, mmpp, trace"

// Process yields successive inter-arrival gaps.
type Process interface {
	// Next returns the gap between the previous arrival and the next one.
	Next() time.Duration
}

// Spec names an arrival process and its parameters, as the load generator's and
// the simulator's options give them.
type Spec struct {
	Kind string  // one of Kinds
	Rate float64 // mean rate in req/s of constant, poisson and gamma
	// CV2 is the squared coefficient of variation of gamma's gaps (cv2 = 1 is
	// Poisson; larger is burstier, as in InferLine's traces).
	CV2   float64
	MMPP  MMPP   // the parameters of mmpp
	Trace *Trace // the arrivals trace replays
}

// New returns the arrival process kind at ratePerSec requests per second: Spec.New
// for the kinds with a rate (constant, poisson, gamma with cv2).
func New(kind string, ratePerSec, cv2 float64, seed uint64) (Process, error) {
	return Spec{Kind: kind, Rate: ratePerSec, CV2: cv2}.New(seed)
}

// New returns the process s names, seeded (trace ignores the seed). Errors name
// the bad parameter and what is allowed.
func (s Spec) New(seed uint64) (Process, error) {
	switch s.Kind {
	case "mmpp":
		return newMMPP(s.MMPP, seed)
	case "trace":
		if s.Trace == nil || len(s.Trace.Offsets) == 0 {
			return nil, fmt.Errorf("trace arrivals: no trace given; a trace is %s", TraceFormats)
		}
		return s.Trace.Process(), nil
	case "constant", "poisson", "gamma":
	default:
		return nil, fmt.Errorf("unknown arrival process %q; allowed: %s", s.Kind, Kinds)
	}
	ratePerSec := s.Rate
	if !(ratePerSec > 0) || math.IsInf(ratePerSec, 0) {
		return nil, fmt.Errorf("arrival rate %v req/s: must be a finite number > 0", ratePerSec)
	}
	mean := 1 / ratePerSec
	switch s.Kind {
	case "constant":
		return &constant{gap: seconds(mean)}, nil
	case "poisson":
		return &sampler{dist: distuv.Exponential{Rate: ratePerSec, Src: rand.NewSource(seed)}}, nil
	}
	if !(s.CV2 > 0) || math.IsInf(s.CV2, 0) {
		return nil, fmt.Errorf("gamma arrivals: cv2 %v must be a finite number > 0", s.CV2)
	}
	// Gamma with shape k = 1/cv2 and rate k/mean has the given mean and cv².
	k := 1 / s.CV2
	return &sampler{dist: distuv.Gamma{Alpha: k, Beta: k / mean, Src: rand.NewSource(seed)}}, nil
}

// MeanRate is the process's long-run mean rate in req/s: Rate, MMPP.MeanRate, or
// the whole trace's (Trace.MeanRate).
func (s Spec) MeanRate() float64 {
	switch s.Kind {
	case "mmpp":
		return s.MMPP.MeanRate()
	case "trace":
		if s.Trace == nil || len(s.Trace.Offsets) == 0 {
			return 0
		}
		_, r := s.Trace.MeanRate(0)
		return r
	}
	return s.Rate
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
