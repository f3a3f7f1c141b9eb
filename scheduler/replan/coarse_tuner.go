package replan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
)

// The tuner's scopes (`piccolo gateway --tune-scope`, docs/traffic.md "Live:
// coarse-grained tuning"): what one scaling action changes.
const (
	// ScopeModule is InferLine's Tuner (Tuner): each module's machines
	// scaled on the envelope, from the fine-grained trace plan.
	ScopeModule = "module"
	// ScopePipeline is coarse-grained tuning (CoarseTuner): the whole
	// pipeline's replicas scaled together, every module by the same factor,
	// from the coarse-grained plan.
	ScopePipeline = "pipeline"
)

// TunerScopes are the scopes NewScopedTuner accepts, the default first.
var TunerScopes = []string{ScopeModule, ScopePipeline}

// CheckTunerScope returns an error naming scope and the allowed ones unless
// scope is one of TunerScopes.
func CheckTunerScope(scope string) error {
	if !slices.Contains(TunerScopes, scope) {
		return fmt.Errorf("tuner scope %q: must be one of %s", scope, strings.Join(TunerScopes, ", "))
	}
	return nil
}

// Tuning is what a gateway's tuner loop drives (controlplane.StartTuner):
// Observe each closed TunerBucket's arrivals, oldest first; Decide after each;
// on a decision, serve Tuned(base). Not safe for concurrent use.
type Tuning interface {
	Observe(at time.Time, arrivals int)
	Decide() (TunerDecision, bool)
	Tuned(plan *api.Plan) *api.Plan
}

var (
	_ Tuning = (*Tuner)(nil)
	_ Tuning = (*CoarseTuner)(nil)
)

// NewScopedTuner returns the tuner of scope (one of TunerScopes) for session
// in plan, planned for the trace sample: a Tuner for ScopeModule, a
// CoarseTuner for ScopePipeline. Errors: an unknown scope (naming the
// allowed), and those of NewTuner or NewCoarseTuner.
func NewScopedTuner(scope string, plan *api.Plan, session string, slo time.Duration, sample *arrival.Trace, now time.Time) (Tuning, error) {
	if err := CheckTunerScope(scope); err != nil {
		return nil, err
	}
	if scope == ScopePipeline {
		return NewCoarseTuner(plan, session, sample)
	}
	return NewTuner(plan, session, slo, sample, now)
}

// Coarse-grained tuning's rule (AutoScale, as InferLine's baseline uses it,
// §7): every CoarseEvery the pipeline replicas follow the last CoarseWindow's
// rate; up at once, down after CoarseSettle below.
const (
	CoarseEvery  = time.Second
	CoarseWindow = 5 * time.Second
	CoarseSettle = 15 * time.Second
)

// CoarseTuner is coarse-grained tuning, the baseline InferLine's Tuner is
// measured against (§7, after AutoScale): the session's pipeline scales in
// whole replicas, every module's machines by the same factor, on the rate
// alone (no envelope). Every CoarseEvery of observed buckets it sizes the
// pipeline for the last CoarseWindow's rate at the rate one replica carries
// in the planning trace (the sample's busiest CoarseWindow / the plan's
// replicas; not scaled again for the sample's own bursts): more replicas at
// once, fewer after CoarseSettle of checks wanting fewer, never fewer than the
// plan's. The plan's pipeline replicas are its most machines of any module of
// the session (a coarse-grained plan, simulate.PlanCoarse, has the same
// number for every module).
//
// Same contract as Tuner: it decides, Tuned scales the plan; one goroutine.
type CoarseTuner struct {
	session    string
	planned    map[string]float64 // module → the plan's machines
	perReplica float64            // req/s one pipeline replica carries
	n0, cur    int                // pipeline replicas: planned, now
	window     []int              // ring of the last CoarseWindow's buckets
	next       int
	filled     int
	observed   int // buckets observed, for the CoarseEvery cadence
	below      time.Duration
}

// NewCoarseTuner returns the coarse-grained tuner of session in plan
// (unplaced or placed), planned for the trace sample. Errors: the session is
// not in the plan or not planned, a module with no machines, a sample with no
// arrivals.
func NewCoarseTuner(plan *api.Plan, session string, sample *arrival.Trace) (*CoarseTuner, error) {
	busiest := maxWindowRate(BucketCounts(sample), int(CoarseWindow/TunerBucket))
	if !(busiest > 0) {
		return nil, errors.New("coarse-grained tuner: the planning trace has no arrivals")
	}
	sp, err := plannedSession(plan, session)
	if err != nil {
		return nil, fmt.Errorf("coarse-grained tuner: %w", err)
	}
	c := &CoarseTuner{session: session, planned: map[string]float64{}, window: make([]int, int(CoarseWindow/TunerBucket))}
	replicas := 0.0 // the plan's pipeline replicas: its most machines of a module
	for _, mp := range sp.Modules {
		n := 0.0
		for _, g := range mp.Configs {
			n += g.Machines
		}
		if !(n > 0) {
			return nil, fmt.Errorf("coarse-grained tuner: session %q module %q has no machines", session, mp.Name)
		}
		c.planned[mp.Name] = n
		replicas = math.Max(replicas, n)
	}
	c.perReplica = busiest / replicas
	c.n0 = max(1, int(math.Round(replicas)))
	c.cur = c.n0
	return c, nil
}

// Observe records the arrivals of the next TunerBucket (at is unused: the
// cadence counts buckets, as the simulated comparison does).
func (c *CoarseTuner) Observe(_ time.Time, arrivals int) {
	c.window[c.next] = arrivals
	c.next = (c.next + 1) % len(c.window)
	c.filled = min(c.filled+1, len(c.window))
	c.observed++
}

// Decide sizes the pipeline every CoarseEvery of observed buckets and returns
// the decision when its replicas change: Machines has every module, each at
// its planned machines × replicas now / the plan's.
func (c *CoarseTuner) Decide() (TunerDecision, bool) {
	if c.observed == 0 || c.observed%int(CoarseEvery/TunerBucket) != 0 {
		return TunerDecision{}, false
	}
	sum := 0
	for _, n := range c.window {
		sum += n
	}
	r := float64(sum) / (float64(c.filled) * TunerBucket.Seconds())
	want := max(c.n0, int(math.Ceil(r/c.perReplica-1e-9)))
	switch {
	case want > c.cur:
		c.below = 0
	case want < c.cur:
		if c.below += CoarseEvery; c.below < CoarseSettle {
			return TunerDecision{}, false
		}
		c.below = 0
	default:
		c.below = 0
		return TunerDecision{}, false
	}
	d := TunerDecision{Up: want > c.cur, Rate: r, Window: CoarseWindow, Machines: make(map[string]float64, len(c.planned))}
	c.cur = want
	for m, k := range c.planned {
		d.Machines[m] = k * c.factor()
	}
	return d, true
}

// factor is the scale of the plan now: replicas now over the plan's whole
// replicas (n0), so that back at n0 the tuned plan is the plan itself (with
// the plan's fractional replicas, 2.5 say, cur/replicas at n0 = 3 left the
// pipeline 20% over the plan for good).
func (c *CoarseTuner) factor() float64 { return float64(c.cur) / float64(c.n0) }

// Tuned returns a copy of plan (unplaced) with every module of the session
// scaled by the same factor, the pipeline's replicas now / the plan's
// (ScaleMachines).
func (c *CoarseTuner) Tuned(plan *api.Plan) *api.Plan {
	return ScaleMachines(plan, c.session, func(string) float64 { return c.factor() })
}
