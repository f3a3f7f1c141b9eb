package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Candidate is one config a module may run with: a profile entry on a hardware type.
// Duration is in seconds, Throughput t = c·b/d in req/s per machine, Price in cost
// units per machine. For a module with a measured tail (api.Tail), Duration is
// the batch duration its WCL is computed with and Throughput the one its
// machines are sized by (withTail); the profile's duration is kept apart for
// the plan.
type Candidate struct {
	Hardware    string
	Price       float64
	Batch       int
	Concurrency int
	Duration    float64
	Throughput  float64
	// profiled is the profile entry's duration (s) where withTail changed
	// Duration and Throughput; 0 where it did not.
	profiled float64
}

// profiledDuration returns the profile entry's batch duration (s): what the
// plan records and the data plane and simulator run.
func (c Candidate) profiledDuration() float64 {
	if c.profiled > 0 {
		return c.profiled
	}
	return c.Duration
}

// profiledThroughput returns the profile entry's throughput c·b/d (req/s per
// machine), as the plan records it.
func (c Candidate) profiledThroughput() float64 {
	if c.profiled > 0 {
		return float64(c.Concurrency*c.Batch) / c.profiled
	}
	return c.Throughput
}

// Ratio returns the throughput-cost ratio r = t/price (§III-B).
func (c Candidate) Ratio() float64 { return c.Throughput / c.Price }

func (c Candidate) String() string {
	return fmt.Sprintf("%s b%d c%d (%.4gs)", c.Hardware, c.Batch, c.Concurrency, c.Duration)
}

// LatencyModel is a latency model: the worst-case latency, in seconds, of a config group
// whose batches are collected from a stream of w req/s (w = the rate of the group
// and of every group ranked after it, Theorem 1).
type LatencyModel interface {
	Name() string
	// WCL returns the worst-case latency in seconds; +Inf when w is too small to
	// ever fill a batch.
	WCL(c Candidate, w float64) float64
	// Need returns the smallest stream rate w (req/s) at which WCL(c, w) ≤ L, or
	// +Inf when no rate is enough. Models whose WCL does not depend on w return 0
	// when feasible.
	Need(c Candidate, L float64) float64
	// RateDependent reports whether WCL depends on w (only then can dummy
	// requests help, §III-D).
	RateDependent() bool
}

// The latency models, by the name plans record in LatencyModel.
var (
	// TheoremOne is the WCL of a config group under TC dispatch as Theorem 1
	// (§III-B) publishes it: d + b/w, w the group's stream rate.
	TheoremOne LatencyModel = theorem1{}
	// TCExact is d + (b−1)/w: the oldest item of a batch waits for the b−1 items
	// after it, not for b. Batch 1 waits for nothing.
	TCExact LatencyModel = tcExact{}
	// RoundRobin is 2d (Nexus, InferLine, Clipper; §II).
	RoundRobin LatencyModel = rr2d{}
	// LocalThroughput is d + b/t (Scrooge; Table III).
	LocalThroughput LatencyModel = local{}
)

// withDummies returns the model that bounds a module's WCL once dummy requests are
// in its stream. The exact collection time (b−1)/w assumes one evenly spaced stream;
// real and dummy arrivals are two independent streams, so a batch can hold one
// dummy fewer than average and its oldest item waits up to b/w: Theorem 1's bound
// (found by the simulator, simulate/wcl_test.go). Other models are unchanged.
func withDummies(m LatencyModel) LatencyModel {
	if m == TCExact {
		return TheoremOne
	}
	return m
}

// BuiltinModels returns a registry of the built-in latency models, by the
// names plans record in LatencyModel.
func BuiltinModels() *registry.Registry[LatencyModel] {
	return registry.Must(registry.New("latency model", "latency models", TCExact, TheoremOne, RoundRobin, LocalThroughput))
}

// defaultModels is the registry used when Options.Strategies.Models is nil.
var defaultModels = BuiltinModels()

// ModelByName returns the built-in latency model a plan names
// (BuiltinModels().Lookup).
func ModelByName(name string) (LatencyModel, error) { return defaultModels.Lookup(name) }

type theorem1 struct{}

func (theorem1) Name() string        { return "tc-theorem1" }
func (theorem1) RateDependent() bool { return true }
func (theorem1) WCL(c Candidate, w float64) float64 {
	if w <= 0 {
		return math.Inf(1)
	}
	return c.Duration + float64(c.Batch)/w
}
func (theorem1) Need(c Candidate, L float64) float64 {
	if L <= c.Duration {
		return math.Inf(1)
	}
	return float64(c.Batch) / (L - c.Duration)
}

type tcExact struct{}

func (tcExact) Name() string        { return "tc-exact" }
func (tcExact) RateDependent() bool { return true }
func (tcExact) WCL(c Candidate, w float64) float64 {
	if c.Batch <= 1 {
		return c.Duration
	}
	if w <= 0 {
		return math.Inf(1)
	}
	return c.Duration + float64(c.Batch-1)/w
}
func (tcExact) Need(c Candidate, L float64) float64 {
	if c.Batch <= 1 {
		if L >= c.Duration {
			return 0
		}
		return math.Inf(1)
	}
	if L <= c.Duration {
		return math.Inf(1)
	}
	return float64(c.Batch-1) / (L - c.Duration)
}

type rr2d struct{}

func (rr2d) Name() string                       { return "rr-2d" }
func (rr2d) RateDependent() bool                { return false }
func (rr2d) WCL(c Candidate, _ float64) float64 { return 2 * c.Duration }
func (rr2d) Need(c Candidate, L float64) float64 {
	if 2*c.Duration <= L {
		return 0
	}
	return math.Inf(1)
}

type local struct{}

func (local) Name() string        { return "local" }
func (local) RateDependent() bool { return false }
func (local) WCL(c Candidate, _ float64) float64 {
	return c.Duration + float64(c.Batch)/c.Throughput
}
func (l local) Need(c Candidate, L float64) float64 {
	if l.WCL(c, 0) <= L {
		return 0
	}
	return math.Inf(1)
}

// filter restricts which candidates a policy may use (§IV-C ablations).
type filter struct {
	noBatching     bool   // batch 1 only (Picc-nb)
	noMultiplexing bool   // concurrency 1 only (Picc-np)
	hardware       string // one hardware type only ("" = all)
}

// candidates returns the configs of model under f, in throughput-cost order (ties:
// the shorter duration first), or an error when none is left. A config's
// duration is its profile entry's plus, where the hardware has a link and the
// profile gives the item's bytes, the batch's transfer (api.Hardware.Transfer):
// the live gateway's lane is busy for the whole round trip, so the transfer
// is the machine's time as much as the compute is.
func candidates(cfg *api.Config, model string, f filter) ([]Candidate, error) {
	var out []Candidate
	for _, p := range cfg.ProfilesOf(model) {
		if f.hardware != "" && p.Hardware != f.hardware {
			continue
		}
		hw, ok := cfg.HardwareByName(p.Hardware)
		if !ok {
			return nil, fmt.Errorf("model %q: profile names unknown hardware %q", model, p.Hardware)
		}
		for _, e := range p.Entries {
			conc := e.Concurrency
			if conc < 1 {
				conc = 1
			}
			if (f.noBatching && e.Batch != 1) || (f.noMultiplexing && conc != 1) {
				continue
			}
			if e.Batch < 1 || e.Duration <= 0 || hw.Price <= 0 {
				continue // the loader rejects these; never divide by them
			}
			d := (time.Duration(e.Duration) + hw.Transfer(e.Batch, p.InputBytes+p.OutputBytes)).Seconds()
			out = append(out, Candidate{
				Hardware: p.Hardware, Price: hw.Price, Batch: e.Batch, Concurrency: conc,
				Duration: d, Throughput: float64(conc*e.Batch) / d,
			})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("model %q has no usable profile entry%s", model, f.describe())
	}
	sortCandidates(out)
	return out, nil
}

// sortCandidates puts cands in throughput-cost order (ties: the shorter
// duration first), stably.
func sortCandidates(cands []Candidate) {
	slices.SortStableFunc(cands, func(a, b Candidate) int {
		if c := cmp.Compare(b.Ratio(), a.Ratio()); c != 0 {
			return c
		}
		return cmp.Compare(a.Duration, b.Duration)
	})
}

func (f filter) describe() string {
	s := ""
	if f.noBatching {
		s += ", batch 1 only"
	}
	if f.noMultiplexing {
		s += ", concurrency 1 only"
	}
	if f.hardware != "" {
		s += ", hardware " + f.hardware + " only"
	}
	if s == "" {
		return ""
	}
	return " (" + s[2:] + ")"
}
