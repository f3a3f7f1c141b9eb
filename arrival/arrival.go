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

	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Process yields successive inter-arrival gaps.
type Process interface {
	// Next returns the gap between the previous arrival and the next one.
	Next() time.Duration
}

// Kind is an arrival process kind: what builds a Process from a Spec, chosen
// by name (Spec.Kind, --arrival). An immutable value; Builtin holds constant,
// poisson, gamma, mmpp and trace, and a Spec's Registry may offer more (a
// registry main or a test builds with Builtin().With).
type Kind interface {
	// Name is the name users choose the kind by, e.g. "poisson".
	Name() string
	// New returns the process s describes (s.Kind is this kind's name),
	// seeded. Errors name the bad parameter and what is allowed.
	New(s Spec, seed uint64) (Process, error)
	// MeanRate returns s's long-run mean rate in req/s; 0 when s gives none.
	MeanRate(s Spec) float64
	// OwnRate reports whether the kind's rate comes from its own parameters
	// (mmpp's bursts, trace's arrivals) rather than from Spec.Rate: callers
	// then take no --rate and read MeanRate.
	OwnRate() bool
}

// Builtin returns a registry of this package's arrival kinds.
func Builtin() *registry.Registry[Kind] {
	return registry.Must(registry.New[Kind]("arrival process", "arrival processes",
		rateKind{"constant"}, rateKind{"poisson"}, rateKind{"gamma"}, mmppKind{}, traceKind{}))
}

var builtin = Builtin()

// Kinds lists the built-in kinds' names, comma separated, for flag help.
var Kinds = builtin.String()

// Lookup returns the kind called name in r (nil: Builtin), or an error
// naming the allowed ones.
func Lookup(r *registry.Registry[Kind], name string) (Kind, error) {
	if r == nil {
		r = builtin
	}
	return r.Lookup(name)
}

// OwnRate reports whether the built-in kind called name takes its rate from
// its own parameters (Kind.OwnRate); false for an unknown name.
func OwnRate(name string) bool {
	k, err := builtin.Lookup(name)
	return err == nil && k.OwnRate()
}

// Spec names an arrival process and its parameters, as the load generator's and
// the simulator's options give them.
type Spec struct {
	Kind string  // a name in Registry
	Rate float64 // mean rate in req/s of constant, poisson and gamma
	// CV2 is the squared coefficient of variation of gamma's gaps (cv2 = 1 is
	// Poisson; larger is burstier, as in InferLine's traces).
	CV2   float64
	MMPP  MMPP   // the parameters of mmpp
	Trace *Trace // the arrivals trace replays
	// Registry is where Kind is looked up; nil: Builtin.
	Registry *registry.Registry[Kind]
}

// New returns the arrival process kind at ratePerSec requests per second: Spec.New
// for the kinds with a rate (constant, poisson, gamma with cv2).
func New(kind string, ratePerSec, cv2 float64, seed uint64) (Process, error) {
	return Spec{Kind: kind, Rate: ratePerSec, CV2: cv2}.New(seed)
}

// New returns the process s names, seeded (trace ignores the seed). Errors name
// the bad parameter and what is allowed.
func (s Spec) New(seed uint64) (Process, error) {
	k, err := Lookup(s.Registry, s.Kind)
	if err != nil {
		return nil, err
	}
	return k.New(s, seed)
}

// MeanRate is the process's long-run mean rate in req/s: Rate, MMPP.MeanRate, or
// the whole trace's (Trace.MeanRate); 0 for an unknown kind.
func (s Spec) MeanRate() float64 {
	k, err := Lookup(s.Registry, s.Kind)
	if err != nil {
		return 0
	}
	return k.MeanRate(s)
}

// rateKind is a renewal process at Spec.Rate: constant gaps, exponential
// (poisson) or gamma-distributed with Spec.CV2.
type rateKind struct{ name string }

func (k rateKind) Name() string          { return k.name }
func (rateKind) OwnRate() bool           { return false }
func (rateKind) MeanRate(s Spec) float64 { return s.Rate }
func (k rateKind) New(s Spec, seed uint64) (Process, error) {
	ratePerSec := s.Rate
	if !(ratePerSec > 0) || math.IsInf(ratePerSec, 0) {
		return nil, fmt.Errorf("arrival rate %v req/s: must be a finite number > 0", ratePerSec)
	}
	mean := 1 / ratePerSec
	switch k.name {
	case "constant":
		return &constant{gap: seconds(mean)}, nil
	case "poisson":
		return &sampler{dist: distuv.Exponential{Rate: ratePerSec, Src: rand.NewSource(seed)}}, nil
	}
	if !(s.CV2 > 0) || math.IsInf(s.CV2, 0) {
		return nil, fmt.Errorf("gamma arrivals: cv2 %v must be a finite number > 0", s.CV2)
	}
	// Gamma with shape k = 1/cv2 and rate k/mean has the given mean and cv².
	shape := 1 / s.CV2
	return &sampler{dist: distuv.Gamma{Alpha: shape, Beta: shape / mean, Src: rand.NewSource(seed)}}, nil
}

type mmppKind struct{}

func (mmppKind) Name() string                             { return "mmpp" }
func (mmppKind) OwnRate() bool                            { return true }
func (mmppKind) MeanRate(s Spec) float64                  { return s.MMPP.MeanRate() }
func (mmppKind) New(s Spec, seed uint64) (Process, error) { return newMMPP(s.MMPP, seed) }

type traceKind struct{}

func (traceKind) Name() string  { return "trace" }
func (traceKind) OwnRate() bool { return true }
func (traceKind) MeanRate(s Spec) float64 {
	if s.Trace == nil || len(s.Trace.Offsets) == 0 {
		return 0
	}
	_, r := s.Trace.MeanRate(0)
	return r
}
func (traceKind) New(s Spec, _ uint64) (Process, error) {
	if s.Trace == nil || len(s.Trace.Offsets) == 0 {
		return nil, fmt.Errorf("trace arrivals: no trace given; a trace is %s", TraceFormats)
	}
	return s.Trace.Process(), nil
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
